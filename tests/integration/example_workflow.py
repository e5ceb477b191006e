"""The Submit page's example workflow, as shipped, run end to end: the check both backends'
tests share (tests/integration/test_workflow_data.py, tests/integration/slurm/).

Its second step reads the first step's output in the project's folder, and its third waits
on a flag file the second writes there: it is not released before the flag exists
(docs/workflows.md, docs/storage.md)."""

from __future__ import annotations

import html
import json
import subprocess
from pathlib import Path

from django.contrib.auth.models import User
from django.test import Client

from scheduling.models import Task, Workflow
from tests.integration.conftest import wait_for, worker_log

STEPS = ("simulate", "train", "report")


def submit_page_example() -> tuple[str, str]:
    """The example workflow exactly as the Submit page shows it, and its project."""
    client = Client()
    client.force_login(User.objects.get(username="alice"))
    page = client.get("/tasks/new/").content.decode()
    example = html.unescape(page.split('<pre id="example-workflow">', 1)[1].split("</pre>")[0])
    [project] = [line.split(": ")[1] for line in example.splitlines() if line.startswith("project")]
    return example, project


def run_the_example(api, root: Path, proc: subprocess.Popen, *, timeout: float) -> list[Task]:
    """Submit the example as alice, wait for it to end, and check what it did with its data;
    `root` is where the test moved the site's storage areas. Returns its tasks."""
    example, project = submit_page_example()  # alice's first project
    made = api.post("/api/v1/workflows/", data=example, content_type="application/yaml")
    assert made.status_code == 201, made.json()
    workflow = Workflow.objects.get(pk=made.json()["id"])
    shared = root / "projects" / project / "flows" / "prepare-and-train"
    report = workflow.tasks.get(name="report")
    assert report.trigger_file == f"{shared}/READY"  # relative: in the project's folder

    def ended():
        # The workflow's own state follows its last task's end (the end hook): wait for both.
        tasks = list(workflow.tasks.all())
        workflow.refresh_from_db()
        return all(t.is_terminal for t in tasks) and workflow.state != "running" and tasks

    try:
        tasks = wait_for(ended, timeout=timeout, what="the example workflow to end")
    except AssertionError:
        states = {t.name: (t.state, t.reason) for t in workflow.tasks.all()}
        raise AssertionError(f"stuck: {states}\n{worker_log(proc)}") from None
    logs = {t.name: api.get(f"/api/v1/tasks/{t.pk}/log/").json()["log"] for t in tasks}
    states = {t.name: (t.state, t.reason) for t in tasks}
    assert {t.name: t.state for t in tasks} == dict.fromkeys(STEPS, "succeeded"), (states, logs)
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
    return tasks
