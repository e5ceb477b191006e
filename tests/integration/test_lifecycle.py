"""API submit → dispatch on a real Celery worker → local process → poll → final state."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import connection

from scheduling.models import Task
from tests.conftest import descriptor, in_ci, submit
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _final(task_id: int, proc, timeout: float = 60) -> Task:
    def done():
        task = Task.objects.get(pk=task_id)
        return task if task.is_terminal else None

    try:
        return wait_for(done, timeout=timeout, what=f"task {task_id} to end")
    except AssertionError:
        task = Task.objects.get(pk=task_id)
        raise AssertionError(
            f"task {task_id} stuck in {task.state} ({task.reason})\n{worker_log(proc)}"
        ) from None


def test_ci_runs_these_against_postgres_and_redis():
    """In CI the real services are switched on; if they are not, this fails rather than skips."""
    if not in_ci():
        pytest.skip("outside CI the embedded default is fine")
    assert connection.vendor == "postgresql", "CI must set DATABASE_URL to PostgreSQL"
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "CI must set REDIS_URL"


def test_a_task_runs_end_to_end_on_a_real_worker(api, start_worker, local_root):
    proc = start_worker()
    response = submit(
        api, descriptor(name="e2e", command=["sh", "-c", "echo hello-from-$SWITCHYARD_TASK_KEY"])
    )
    assert response.status_code == 201, response.json()
    task = _final(response.json()["id"], proc)
    assert task.state == "succeeded", (task.reason, worker_log(proc))
    assert task.exit_code == 0
    states = [e.to_state for e in task.events.order_by("at", "id")]
    assert states[0] == "pending" and states[-1] == "succeeded"
    assert "running" in states or "queued" in states
    log = api.get(f"/api/v1/tasks/{task.pk}/log/").json()["log"]
    assert f"hello-from-{task.key}" in log


def test_failure_timeout_and_cancel_reach_their_states(api, start_worker):
    proc = start_worker()
    failing = submit(api, descriptor(name="fails", command=["sh", "-c", "exit 3"])).json()["id"]
    slow = submit(api, descriptor(name="slow", walltime="1s", command=["sleep", "30"])).json()["id"]
    victim = submit(api, descriptor(name="victim", command=["sleep", "60"])).json()["id"]

    wait_for(
        lambda: Task.objects.get(pk=victim).state == "running", timeout=30, what="victim running"
    )
    # 202: the worker cancels the job; the request itself calls no backend. A worker quick
    # enough to have done it before the answer was written makes it a 200 with the task
    # cancelled already (the API's documented meaning).
    answer = api.post(f"/api/v1/tasks/{victim}/cancel/")
    assert (answer.status_code, answer.json()["cancelling"]) in ((202, True), (200, False))
    if answer.status_code == 200:
        assert answer.json()["state"] == "cancelled"

    failed = _final(failing, proc)
    assert (failed.state, failed.exit_code) == ("failed", 3)
    assert _final(slow, proc).state == "timeout"
    cancelled = _final(victim, proc)
    assert cancelled.state == "cancelled"


def test_a_dispatch_lost_with_the_worker_is_recovered_by_the_sweep_once(
    api, start_worker, purge_broker
):
    # No worker is running: the dispatch message sits in the broker. Then it is lost, as when
    # a worker dies holding it or the process died between commit and publish.
    task_id = submit(api, descriptor(name="orphan", command=["true"])).json()["id"]
    purge_broker()
    proc = start_worker(sweep_seconds=1, grace_seconds=1)
    task = _final(task_id, proc)
    assert task.state == "succeeded", task.reason
    assert task.attempts == 1
    assert task.attempt_set.count() == 1
