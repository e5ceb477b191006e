"""Workflows end to end: API submit → a real Celery worker (with beat) → local processes.

The research chain runs in order, a flaky step is retried until it succeeds, and a trigger file
made by the test releases a waiting step within one check period.
"""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from django.utils import timezone

from scheduling.models import Task, TaskEvent, Workflow
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

SMALL = {"cpus": 1, "memory": "1Gi"}

# The research flow as one descriptor: simulate to make training data, train,
# infer, and hand the predictions to an agent. Each step is a tiny real command, sized to
# fit its queue: training needs an estimate (within the walltime) and goes to the
# whole-node training queue; the agent step is small and short, so it runs sandboxed.
SEED_CHAIN = {
    "apiVersion": "switchyard/v1",
    "kind": "Workflow",
    "name": "materials-chain",
    "project": "materials",
    "tasks": [
        {
            "name": "simulate",
            "type": "hpc-simulation",
            "resources": SMALL,
            "walltime": "5m",
            "command": ["sh", "-c", "echo step-simulate"],
        },
        {
            "name": "train",
            "type": "ai-training",
            "depends_on": ["simulate"],
            "resources": {"gpus": 1, "cpus": 1, "memory": "1Gi"},
            "estimate": "1m",
            "walltime": "5m",
            "command": ["sh", "-c", "echo step-train"],
        },
        {
            "name": "infer",
            "type": "ai-inference",
            "depends_on": ["train"],
            "resources": {"gpus": 1, "cpus": 1, "memory": "1Gi"},
            "walltime": "5m",
            "command": ["sh", "-c", "echo step-infer"],
        },
        {
            "name": "agent",
            "type": "agent",
            "depends_on": ["infer"],
            "resources": SMALL,
            "walltime": "2m",
            "command": ["sh", "-c", "echo step-agent"],
        },
    ],
}


def _submit(api, doc: dict) -> Workflow:
    response = api.post("/api/v1/workflows/", data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 201, response.json()
    return Workflow.objects.get(pk=response.json()["id"])


def _ended(workflow: Workflow, proc, timeout: float = 45) -> Workflow:
    def done():
        tasks = workflow.tasks.all()
        finished = all(t.is_terminal for t in tasks)
        current = Workflow.objects.get(pk=workflow.pk)
        return current if finished and current.state != "running" else None

    try:
        return wait_for(done, timeout=timeout, what=f"workflow {workflow.pk} to end")
    except AssertionError:
        states = {t.name: (t.state, t.reason) for t in workflow.tasks.all()}
        raise AssertionError(f"workflow stuck: {states}\n{worker_log(proc)}") from None


def _first(task: Task, *states: str) -> datetime:
    return task.events.filter(to_state__in=states).order_by("at", "id").first().at


def test_the_seed_chain_runs_to_succeeded_each_step_after_its_predecessor(api, start_worker):
    proc = start_worker()
    workflow = _ended(_submit(api, SEED_CHAIN), proc)
    assert (workflow.state, workflow.reason) == ("succeeded", "every task succeeded or was skipped")

    steps = [workflow.tasks.get(name=s["name"]) for s in SEED_CHAIN["tasks"]]
    assert [(t.name, t.state, t.queue.name) for t in steps] == [
        ("simulate", "succeeded", "hpc"),
        ("train", "succeeded", "training"),
        ("infer", "succeeded", "inference-agent"),
        ("agent", "succeeded", "inference-agent"),
    ]
    for before, after in zip(steps, steps[1:], strict=False):
        done = before.events.get(to_state="succeeded").at
        assert _first(after, "pending") >= done  # released on the predecessor's success
        assert _first(after, "queued", "running") > done, (before.name, after.name)
        assert after.events.first().to_state == "waiting"
    for step in steps:
        log = api.get(f"/api/v1/tasks/{step.pk}/log/").json()["log"]
        assert f"step-{step.name}" in log


def test_a_step_that_fails_twice_then_succeeds_is_retried_to_success(api, start_worker):
    # Each attempt runs in a fresh sandbox with its own folder, so nothing it writes reaches
    # the next: the attempt's number is the last part of its key (sy-<task>-<salt>-<n>).
    proc = start_worker(extra_env={"SWITCHYARD_RETRY_BACKOFF_MS": "200"})
    script = 'n=${SWITCHYARD_TASK_KEY##*-}\necho "attempt $n"\ntest "$n" -ge 3\n'

    def flaky(name: str, retries: int) -> dict:
        return {
            "apiVersion": "switchyard/v1",
            "kind": "Workflow",
            "name": name,
            "project": "materials",
            "tasks": [
                {
                    "name": "flaky",
                    "type": "hpc-simulation",
                    "resources": SMALL,
                    "walltime": "5m",
                    "retry_count": retries,
                    "script": script,
                }
            ],
        }

    enough = _submit(api, flaky("enough", 2))
    too_few = _submit(api, flaky("too-few", 1))
    enough, too_few = _ended(enough, proc), _ended(too_few, proc)

    assert enough.state == "succeeded"
    detail = api.get(f"/api/v1/workflows/{enough.pk}/").json()
    [task] = detail["tasks"]
    assert (task["state"], task["attempts"], task["exit_code"]) == ("succeeded", 3, 0)
    attempts = api.get(f"/api/v1/tasks/{task['id']}/").json()["attempt_list"]
    assert [(a["number"], a["state"]) for a in attempts] == [
        (1, "failed"),
        (2, "failed"),
        (3, "succeeded"),
    ]
    assert len({a["backend_id"] for a in attempts}) == 3  # a new backend job each time
    assert "attempt 3" in api.get(f"/api/v1/tasks/{task['id']}/log/").json()["log"]

    assert too_few.state == "failed"
    [task] = too_few.tasks.all()
    assert (task.state, task.attempts) == ("failed", 2)
    assert "attempt 2" in api.get(f"/api/v1/tasks/{task.pk}/log/").json()["log"]


def test_a_trigger_file_made_by_the_test_releases_the_waiting_step_within_a_period(
    api, start_worker, settings, tmp_path
):
    root = tmp_path / "triggers"
    root.mkdir()
    settings.SWITCHYARD_TRIGGER_ROOTS = [str(root)]
    period = 0.5
    proc = start_worker(
        extra_env={
            "SWITCHYARD_TRIGGER_MS": str(int(period * 1000)),
            "SWITCHYARD_TRIGGER_ROOTS": str(root),
        }
    )
    ready = root / "READY"
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "data-ready",
        "project": "materials",
        "tasks": [
            {
                "name": "agent",
                "type": "hpc-simulation",
                "resources": SMALL,
                "walltime": "2m",
                "trigger": {"file": str(ready)},
                "command": ["sh", "-c", "echo released"],
            }
        ],
    }
    workflow = _submit(api, doc)
    task = workflow.tasks.get()
    # The worker's first trigger pass names the file (a loaded machine starts it late) ...
    waiting = f"waiting for the trigger file {ready}"
    wait_for(
        lambda: Task.objects.filter(pk=task.pk, reason=waiting).first(),
        timeout=30,
        what="the trigger pass to name the file",
    )
    # ... and several check periods pass with no file: it keeps waiting, holding nothing.
    time.sleep(4 * period)
    task.refresh_from_db()
    assert task.state == "waiting" and task.backend_id == ""
    assert task.reason == waiting

    made = timezone.now()
    ready.touch()
    released = wait_for(
        lambda: TaskEvent.objects.filter(task=task, to_state="pending").first(),
        timeout=10,
        what="the trigger to release the task",
    )
    lag = (released.at - made).total_seconds()
    # One period, plus the beat's tick and the hop through the broker, which on a loaded
    # 2-core CI machine has been seen to take a second or more.
    assert lag <= period + 1.5, f"released {lag:.2f}s after the file appeared"
    assert _ended(workflow, proc).state == "succeeded"
