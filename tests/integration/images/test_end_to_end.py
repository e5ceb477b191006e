"""A task with an image through the whole portal: submitted through the API, dispatched by a
real worker to the local backend, pulled, run in its image (docs/containers.md)."""

from __future__ import annotations

import pytest

from scheduling.models import Pool, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import descriptor, submit
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.registry, pytest.mark.integration]


def test_a_task_in_an_image_runs_end_to_end_on_a_real_worker(
    api, settings, registry, start_worker, local_root
):
    settings.SWITCHYARD_IMAGE_REGISTRIES = [registry]
    Pool.objects.update(backend="local")
    site_view_invalidate()
    proc = start_worker()
    doc = descriptor(name="in-image", image="demo/tiny:2")
    del doc["command"]  # the image's Entrypoint and Cmd
    response = submit(api, doc)
    assert response.status_code == 201, response.json()

    def ended():
        task = Task.objects.get(pk=response.json()["id"])
        return task if task.is_terminal else None

    try:
        task = wait_for(ended, timeout=90, what="the task in an image to end")
    except AssertionError:
        raise AssertionError(worker_log(proc)) from None
    assert task.state == "succeeded", (task.reason, worker_log(proc))
    log = api.get(f"/api/v1/tasks/{task.pk}/log/").json()["log"]
    assert log.split()[-1] == "2", log  # demo/tiny:2's /etc/demo-release, by its Cmd
    # What the pull took: the running job's reason, kept in its state (the local root).
    states = [p.read_text() for p in local_root.glob("jobs/*/state.json")]
    assert any(f"image {registry}/demo/tiny:2 pulled in" in s for s in states), states
