"""A task with an image through the whole portal: submitted through the API, dispatched by a
real worker to the local backend, pulled, run in its image (docs/containers.md)."""

from __future__ import annotations

import pytest

from scheduling.models import ImageRegistry, Pool, Task
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
    # ... and on its attempt, apart from its run time, in the task's API.
    attempt = task.attempt_set.get()
    assert attempt.pull_seconds is not None and attempt.pull_seconds >= 0
    assert attempt.pull_bytes is not None and attempt.pull_bytes > 0
    detail = api.get(f"/api/v1/tasks/{task.pk}/").json()["attempt_list"][0]
    assert (detail["pull_seconds"], detail["pull_bytes"]) == (
        attempt.pull_seconds,
        attempt.pull_bytes,
    )


def test_a_registry_down_at_the_pull_fails_the_attempt_and_the_retry_runs_the_task(
    api, settings, registry, flaky_registry, start_worker
):
    """Submitted while the registry answers; gone when the worker pulls: that attempt fails
    naming the pull, and the task's retry, with the registry back, pulls and runs."""
    settings.SWITCHYARD_IMAGE_REGISTRIES = [flaky_registry.address]
    ImageRegistry.objects.create(host=flaky_registry.address, any_image=True)  # the catalogue
    Pool.objects.update(backend="local")
    site_view_invalidate()
    doc = descriptor(name="retried", image=f"{flaky_registry.address}/demo/tiny:1", retry_count=2)
    del doc["command"]
    response = submit(api, doc)
    assert response.status_code == 201, response.json()
    flaky_registry.close()  # refuses every connection from now on
    proc = start_worker(extra_env={"SWITCHYARD_RETRY_BACKOFF_MS": "3000"})
    task_id = response.json()["id"]

    def failed_once():
        messages = Task.objects.get(pk=task_id).events.values_list("message", flat=True)
        return next((m for m in messages if "pulling image" in m), None)

    try:
        message = wait_for(failed_once, timeout=60, what="the first attempt to fail")
    except AssertionError:
        raise AssertionError(worker_log(proc)) from None
    assert f"pulling image {flaky_registry.address}/demo/tiny:1 failed" in message, message
    flaky_registry.restore()

    def ended():
        task = Task.objects.get(pk=task_id)
        return task if task.is_terminal else None

    task = wait_for(ended, timeout=90, what="the retry to end")
    assert task.state == "succeeded", (task.reason, worker_log(proc))
    assert task.attempts >= 2
