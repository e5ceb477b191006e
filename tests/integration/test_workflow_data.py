"""The Submit page's example workflow, as shipped, end to end: API submit → a real Celery
worker (with beat) → local-backend jobs in bubblewrap on the demo site's storage areas.

Its second step reads the first step's output in the project's folder, and its third waits
on a flag file the second writes there: it is not released before the flag exists
(docs/workflows.md, docs/storage.md)."""

from __future__ import annotations

import html
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from portal.models import ClusterAccount
from scheduling.models import StorageArea, Workflow
from scheduling.selectors import site_view_invalidate
from tests.conftest import in_ci
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))


@pytest.fixture
def areas(site) -> Iterator[Path]:
    """The demo site's areas in a fresh folder; alice's jobs run as sy-alice."""
    root = Path(settings.VAR_DIR) / "storage-tests" / uuid.uuid4().hex[:10]
    demo = str(settings.SWITCHYARD_DEMO_STORAGE_DIR)
    for area in StorageArea.objects.all():
        area.path = str(root) + area.path.removeprefix(demo)
        area.save()
    alice = User.objects.get(username="alice")
    ClusterAccount.objects.get_or_create(user=alice, defaults={"unix_username": "sy-alice"})
    site_view_invalidate()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _example() -> tuple[str, str]:
    """The example workflow exactly as the Submit page shows it, and its project."""
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    page = client.get("/tasks/new/").content.decode()
    example = html.unescape(page.split('<pre id="example-workflow">', 1)[1].split("</pre>")[0])
    [project] = [line.split(": ")[1] for line in example.splitlines() if line.startswith("project")]
    return example, project


def test_the_example_workflow_passes_data_between_steps_and_waits_on_the_flag(
    api, areas, start_worker
):
    proc = start_worker(extra_env={"SWITCHYARD_TRIGGER_MS": "300"})
    example, project = _example()  # alice's first project
    made = api.post("/api/v1/workflows/", data=example, content_type="application/yaml")
    assert made.status_code == 201, made.json()
    workflow = Workflow.objects.get(pk=made.json()["id"])
    shared = areas / "projects" / project / "flows" / "prepare-and-train"
    report = workflow.tasks.get(name="report")
    assert report.trigger_file == f"{shared}/READY"  # relative: in the project's folder

    def ended():
        tasks = list(workflow.tasks.all())
        return all(t.is_terminal for t in tasks) and tasks

    try:
        tasks = wait_for(ended, timeout=90, what="the example workflow to end")
    except AssertionError:
        states = {t.name: (t.state, t.reason) for t in workflow.tasks.all()}
        raise AssertionError(f"stuck: {states}\n{worker_log(proc)}") from None
    logs = {t.name: api.get(f"/api/v1/tasks/{t.pk}/log/").json()["log"] for t in tasks}
    assert {t.name: t.state for t in tasks} == dict.fromkeys(
        ("simulate", "train", "report"), "succeeded"
    ), logs
    workflow.refresh_from_db()
    assert workflow.state == "succeeded"

    # train read what simulate wrote, in the folder they share.
    assert "simulated 1000 samples" in logs["simulate"]
    assert "epoch 3/3: 1000 samples" in logs["train"], logs["train"]
    model = json.loads((shared / "model.json").read_text())
    assert set(model) == {"mean", "stdev"} and 0.5 < model["stdev"] < 1.5
    assert json.loads(logs["report"].strip().splitlines()[-1]) == model

    # report was released by train's flag, not before it existed (simulate, all it depends
    # on, had ended long before), and it told why it waited.
    ready = (shared / "READY").stat().st_mtime
    report = workflow.tasks.get(name="report")
    released = report.events.get(to_state="pending")
    simulated = workflow.tasks.get(name="simulate").events.get(to_state="succeeded").at
    assert released.at.timestamp() >= ready > simulated.timestamp()
    assert f"trigger file {shared}/READY exists" in released.message
