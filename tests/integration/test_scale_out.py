"""Scale out (docs/deployment.md): workers on several hosts share the database and the broker;
every task is dispatched once, none is lost, and one beat sends while the others wait."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from django.db.models import Count

from scheduling.models import Attempt, Task
from tests.conftest import descriptor
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

TASKS = 1000


def test_two_workers_on_two_hosts_drain_a_thousand_tasks_each_dispatched_once(
    api, start_worker, local_root
):
    workers = [start_worker(hostname="dispatch@host-a"), start_worker(hostname="dispatch@host-b")]
    started = time.monotonic()
    for at in range(0, TASKS, 100):  # ten batches of a hundred, as a parameter sweep sends
        docs = [descriptor(name=f"s{i}", command=["true"]) for i in range(at, at + 100)]
        response = api.post("/api/v1/tasks/batch/", {"tasks": docs}, format="json")
        assert response.status_code == 201, response.content

    def drained():
        return not Task.objects.exclude(state__in=("succeeded", "failed", "cancelled")).exists()

    try:
        wait_for(drained, timeout=300, what=f"{TASKS} tasks to end", step=1)
    except AssertionError:
        states = dict(Task.objects.values_list("state").annotate(n=Count("id")))
        logs = f"{worker_log(workers[0])}\n{worker_log(workers[1])}"
        raise AssertionError(f"{states}\n{logs}") from None
    seconds = time.monotonic() - started

    assert Task.objects.filter(state="succeeded").count() == TASKS, worker_log(workers[0])
    # One attempt each, each its own backend job: no dispatch happened twice.
    assert Attempt.objects.count() == TASKS
    assert Attempt.objects.values("backend_id").distinct().count() == TASKS
    assert not Attempt.objects.values("task").annotate(n=Count("id")).filter(n__gt=1).exists()
    # Both hosts dispatched some of them, and one beat sent while the other stood by.
    logs = [Path(w.log_path).read_text() for w in workers]
    for log in logs:
        assert "scheduling.dispatch_many" in log, log[-3000:]
    beats = ["sending the periodic passes" in log for log in logs]
    standbys = ["standby (another beat holds the lock)" in log for log in logs]
    assert sorted(beats) == [False, True], [log[-3000:] for log in logs]
    assert sorted(standbys) == [False, True], [log[-3000:] for log in logs]
    print(f"{TASKS} tasks drained by two workers in {seconds:.1f} s")
