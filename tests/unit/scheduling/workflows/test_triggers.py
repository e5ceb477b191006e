"""Workflows on the in-memory fake backend: trigger files."""

from __future__ import annotations

import json
import os
import time

import pytest

from scheduling.backends import JobState
from scheduling.engine import settle
from scheduling.models import Task, Workflow
from tests.unit.scheduling.workflows.helpers import (
    task,
    workflow,
)

pytestmark = pytest.mark.django_db


# --- triggers ---------------------------------------------------------------------------------


@pytest.fixture
def trigger_root(settings, tmp_path):
    root = tmp_path / "triggers"
    root.mkdir()
    settings.SWITCHYARD_TRIGGER_ROOTS = [str(root)]
    return root


def test_a_trigger_file_releases_the_waiting_task_once_it_exists(flow, trigger_root):
    ready = trigger_root / "READY"
    flow.submit(task("agent", trigger={"file": str(ready)}))
    with flow.run():
        assert settle.check_triggers() == 1
    t = flow.task("agent")
    assert t.state == "waiting" and t.reason == f"waiting for the trigger file {ready}"
    assert flow.jobs("agent") == []

    ready.touch()
    with flow.run():
        settle.check_triggers()
    t = flow.task("agent")
    assert t.state == "queued" and len(flow.jobs("agent")) == 1
    assert "trigger file" in t.events.get(to_state="pending").message


def test_a_trigger_waits_for_the_dependencies_too(flow, trigger_root):
    ready = trigger_root / "READY"
    ready.touch()
    flow.submit(task("a"), task("b", "a", trigger={"file": str(ready)}))
    with flow.run():
        settle.check_triggers()
    assert flow.task("b").reason == "waiting for a"
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    assert flow.state("b") == "queued"


class StatCount:
    """Counts the file system look-ups (stat and lstat) made while it is on."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        for name in ("stat", "lstat"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._counting(real))

    def _counting(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        return call


def test_a_trigger_pass_over_thousands_of_unchanged_triggers_costs_a_query_and_a_stat_per_folder(
    flow, trigger_root, monkeypatch
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    folders = [trigger_root / f"run-{n}" for n in range(3)]
    for folder in folders:
        folder.mkdir()
    flow.submit(task("first", trigger={"file": str(folders[0] / "READY-0")}))
    first = flow.task("first")
    copies = []
    for i in range(1, 3000):  # 3,000 waiting tasks, a thousand a folder, each its own file
        copy = Task(**{f.attname: getattr(first, f.attname) for f in Task._meta.concrete_fields})
        copy.pk, copy.name = None, f"t{i}"
        copy.trigger_file = str(folders[i % 3] / f"READY-{i}")
        copies.append(copy)
    Task.objects.bulk_create(copies)
    for folder in folders:  # written a while ago
        os.utime(folder, ns=(time.time_ns() - 10**10,) * 2)
    assert settle.check_triggers() == 3000  # the first look at each folder reads its files

    stats = StatCount(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        assert settle.check_triggers() == 0
    assert len(queries) == 1, [q["sql"][:120] for q in queries]
    assert stats.calls == 3  # one per folder, none per task

    (folders[1] / "READY-4").touch()  # one file appears: its folder changes
    with flow.run():
        assert settle.check_triggers() == 1000  # that folder's tasks, not the others
    released = Task.objects.exclude(state="waiting").values_list("name", flat=True)
    assert list(released) == ["t4"]


def test_a_trigger_outside_the_roots_is_a_400_naming_the_field(api, trigger_root, tmp_path):
    doc = workflow(task("a"), task("b", "a", trigger={"file": str(tmp_path / "elsewhere")}))
    response = api.post("/api/v1/workflows/", data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "tasks[1].trigger.file" and str(trigger_root) in error["message"]
    assert Task.objects.count() == Workflow.objects.count() == 0


def test_a_symlink_in_the_root_that_leads_outside_is_not_honoured(
    flow, api, trigger_root, tmp_path_factory
):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "READY").touch()
    flow.submit(task("agent", trigger={"file": str(trigger_root / "READY")}))
    os.symlink(outside / "READY", trigger_root / "READY")  # planted after the submit
    with flow.run():
        settle.check_triggers()
    assert flow.state("agent") == "waiting" and flow.jobs("agent") == []

    # A folder in the root that links outside is refused when the descriptor is checked.
    os.symlink(outside, trigger_root / "out")
    doc = workflow(task("x", trigger={"file": str(trigger_root / "out" / "READY")}), name="wf2")
    response = api.post("/api/v1/workflows/", data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "tasks[0].trigger.file"
