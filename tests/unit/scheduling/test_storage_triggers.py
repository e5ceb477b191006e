"""Trigger files in the storage areas jobs write, and the AI-training template, on the demo
site's areas with real local-backend jobs (docs/workflows.md, docs/storage.md).

A trigger lies in a folder the task's jobs mount or under a trigger root; anything else is
refused at submission naming the field, and a link planted later that leads out is never
followed by the check."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from scheduling import engine, triggers
from scheduling.engine import get_backend, settle
from scheduling.models import Task
from scheduling.presenters.starters import starter_initial
from scheduling.selectors.logs import task_log
from tests.conftest import descriptor, in_ci, submit
from tests.unit.scheduling.local_backend.helpers import finished

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("jobs run as other accounts only when the worker is root")


def waiting_on(api, path: str) -> Task:
    made = submit(api, descriptor(trigger={"file": path}))
    assert made.status_code == 201, made.json()
    task = Task.objects.get(pk=made.json()["id"])
    assert task.state == "waiting"
    return task


@pytest.mark.parametrize(
    "where",
    [
        "projects/genomics/READY",  # another project's folder
        "projects/READY",  # the area's base, beside every project's folder
        "home/bob/READY",  # another user's folder
        "elsewhere/READY",  # not in any area
    ],
)
def test_a_trigger_outside_every_folder_the_jobs_mount_is_refused(api, areas, where):
    path = f"{areas}/{where}"
    refused = submit(api, descriptor(trigger={"file": path}))
    assert refused.status_code == 400, refused.json()
    [error] = refused.json()["errors"]
    assert (error["field"], error["got"]) == ("trigger.file", path)
    assert error["message"].startswith("must lie inside a folder the task's jobs mount (")
    assert f"{areas}/projects/materials" in error["message"]
    assert Task.objects.count() == 0


def test_a_trigger_with_dot_dot_is_refused_even_when_it_leads_back_in(api, areas):
    for path in (
        f"{areas}/projects/materials/../genomics/READY",
        f"{areas}/projects/materials/flows/../READY",
        "flows/../../genomics/READY",
    ):
        refused = submit(api, descriptor(trigger={"file": path}))
        assert refused.status_code == 400, refused.json()
        [error] = refused.json()["errors"]
        assert error["field"] == "trigger.file" and ".. components" in error["message"]


def test_a_trigger_through_a_link_that_leads_out_is_refused_at_submission(api, areas):
    (areas / "projects" / "genomics" / "out").mkdir()
    os.symlink(areas / "projects" / "genomics" / "out", areas / "projects/materials/out")
    path = f"{areas}/projects/materials/out/READY"
    refused = submit(api, descriptor(trigger={"file": path}))
    assert refused.status_code == 400, refused.json()
    [error] = refused.json()["errors"]
    assert error["field"] == "trigger.file" and error["message"].startswith("leads outside")


def test_a_trigger_in_the_projects_or_the_users_folder_is_taken_relative_or_absolute(api, areas):
    flows = areas / "projects" / "materials" / "flows"
    assert waiting_on(api, "flows/run-1/READY").trigger_file == f"{flows}/run-1/READY"
    home = f"{areas}/home/alice/READY"
    assert waiting_on(api, home).trigger_file == home
    task = waiting_on(api, "flows/run-1/READY")
    settle.settle_waiting([task.pk])  # what a worker does once the submit commits
    task.refresh_from_db()
    assert task.reason == f"waiting for the trigger file {flows}/run-1/READY"


def test_a_link_planted_after_submission_that_leads_out_is_never_followed(api, areas):
    projects = areas / "projects"
    (projects / "genomics" / "run").mkdir()
    (projects / "genomics" / "run" / "READY").write_text("genomics' flag\n")
    flows = projects / "materials" / "flows"
    task = waiting_on(api, "flows/READY")

    def still_waiting_and_told_why() -> None:
        settle.check_triggers()
        task.refresh_from_db()
        assert task.state == "waiting" and task.backend_id == ""
        assert "reached through a symbolic link" in task.reason
        assert "links are not followed" in task.reason
        assert "genomics" not in task.reason and "passwd" not in task.reason  # not told where

    # The folder on the way made a link into another project's folder, where the file is.
    os.symlink(projects / "genomics" / "run", flows)
    still_waiting_and_told_why()
    # The file itself a link there.
    flows.unlink()
    flows.mkdir()
    os.symlink(projects / "genomics" / "run" / "READY", flows / "READY")
    still_waiting_and_told_why()
    # A link to the portal host's files.
    (flows / "READY").unlink()
    os.symlink("/etc/passwd", flows / "READY")
    still_waiting_and_told_why()

    # The flag itself, written where the task may wait: released.
    (flows / "READY").unlink()
    (flows / "READY").write_text("")
    settle.check_triggers()
    task.refresh_from_db()
    assert task.state == "pending", task.reason


def test_a_folder_on_the_way_swapped_for_a_link_after_it_was_checked_is_not_followed(
    api, areas, monkeypatch
):
    """The race a job can win by flipping a link in a loop: the path is checked while a
    folder on its way is real, then the folder is a link into another project's folder,
    where the file is, when the file is looked at. Simulated deterministically: resolving
    the path answers as it would have just before the swap."""
    projects = areas / "projects"
    (projects / "genomics" / "run").mkdir()
    (projects / "genomics" / "run" / "READY").write_text("genomics' flag\n")
    flows = projects / "materials" / "flows"
    task = waiting_on(api, "flows/READY")
    allowed = settle._allowed(task.pk)
    os.symlink(projects / "genomics" / "run", flows)  # the swap
    monkeypatch.setattr(triggers.os.path, "realpath", lambda path, **_: str(path))
    assert triggers.trigger_state(str(flows / "READY"), allowed) == "link"
    settle.settle_waiting([task.pk])
    task.refresh_from_db()
    assert task.state == "waiting" and "links are not followed" in task.reason
    assert "genomics" not in task.reason
    # Deeper on the way, under a trigger root too: the walk starts from the allowed folder.
    (flows).unlink()
    (flows / "a").mkdir(parents=True)
    os.symlink(projects / "genomics" / "run", flows / "a" / "b")
    assert triggers.trigger_state(str(flows / "a" / "b" / "READY"), allowed) == "link"
    assert triggers.trigger_state(str(flows / "a" / "READY"), allowed) == "absent"
    (flows / "a" / "READY").write_text("")
    assert triggers.trigger_state(str(flows / "a" / "READY"), allowed) == "ready"


def test_a_trigger_root_is_walked_the_same_way(areas, tmp_path, settings):
    root = tmp_path / "triggers"
    (root / "site").mkdir(parents=True)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "READY").write_text("")
    settings.SWITCHYARD_TRIGGER_ROOTS = [str(root)]
    allowed = triggers.trigger_allowed([], pool="hpc", project="materials", user="alice")
    os.symlink(tmp_path / "secret", root / "out")
    assert triggers.trigger_state(str(root / "out" / "READY"), allowed) == "link"
    assert triggers.trigger_state(str(root / "site" / "READY"), allowed) == "absent"
    (root / "site" / "READY").write_text("")
    assert triggers.trigger_state(str(root / "site" / "READY"), allowed) == "ready"
    assert triggers.trigger_state(str(tmp_path / "secret" / "READY"), allowed) == "outside"


def test_the_training_template_runs_as_it_stands_and_saves_its_model(browser, areas):
    fields = starter_initial("ai-training")
    assert fields is not None and fields["command"].endswith("python3 train.py --epochs 10'")
    fields = {**fields, "project": "materials"}
    response = browser.post("/tasks/new/", fields)
    assert response.status_code == 302, response.content.decode()[-3000:]
    task = Task.objects.get()
    assert engine.task_dispatch(task.pk) == "submitted", task.reason
    task.refresh_from_db()
    job = finished(get_backend("local"), task.backend_id, timeout=60)
    log = task_log(task=task)
    assert job.state.value == "succeeded", f"{job.reason}\n{log}"
    assert re.findall(r"epoch (\d+)/10", log) == [str(n) for n in range(1, 11)], log
    workdir = Path(areas, "projects", "materials", "tasks", str(task.pk))
    assert (workdir / "model.txt").read_text() == "trained for 10 epochs\n"
    assert (workdir / "train.py").exists()
