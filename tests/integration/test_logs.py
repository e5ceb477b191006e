"""A task's path in the logs: the request that stored it, then a real worker's lines about
it, all under the request's id and user, the worker's with the task's and job's ids
(docs/operations.md, "Logs")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduling.models import Task
from tests.conftest import descriptor
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _json_lines(path: str) -> list[dict]:
    # The worker's banner is printed, not logged: every other line is one JSON object.
    text = Path(path).read_text()
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_workers_lines_carry_the_request_that_published_the_task(api, start_worker):
    proc = start_worker(extra_env={"SWITCHYARD_LOG_FORMAT": "json"})
    response = api.post(
        "/api/v1/tasks/",
        data=json.dumps(descriptor(name="followed", command=["true"])),
        content_type="application/json",
        HTTP_X_REQUEST_ID="req-followed-0001",
    )
    assert response.status_code == 201, response.json()
    task_id = response.json()["id"]
    wait_for(
        lambda: Task.objects.get(pk=task_id).is_terminal, timeout=60, what=f"task {task_id} to end"
    )
    task = Task.objects.get(pk=task_id)
    assert task.state == "succeeded", (task.reason, worker_log(proc))

    def dispatched() -> list[dict]:
        return [
            line
            for line in _json_lines(proc.log_path)  # type: ignore[attr-defined]
            if line.get("task_id") == task_id and "pending → queued" in line["message"]
        ]

    [line] = wait_for(dispatched, timeout=10, what="the dispatch line")
    assert line["request_id"] == "req-followed-0001", line
    assert line["user"] == "alice"
    assert line["job_id"] == task.backend_id != ""
    assert line["celery_task"] in ("scheduling.dispatch", "scheduling.dispatch_many")
    assert line["logger"] == "scheduling.states" and line["level"] == "INFO"
    # Celery's own line about that message, by its id, is under the same request.
    assert any(
        other.get("celery_id") == line["celery_id"]
        and "succeeded in" in other["message"]
        and other["request_id"] == "req-followed-0001"
        for other in _json_lines(proc.log_path)  # type: ignore[attr-defined]
    ), worker_log(proc)
    # Its later moves (the polls found it running, then ended) name the task and job too.
    later = [
        line
        for line in _json_lines(proc.log_path)  # type: ignore[attr-defined]
        if line.get("task_id") == task_id and "→ succeeded" in line["message"]
    ]
    assert later and later[0]["job_id"] == task.backend_id, worker_log(proc)
