"""Quotas on real workers: race-free admission across worker processes, and release.

`.ci/run` runs these on PostgreSQL and Redis; elsewhere on the embedded default.
"""

from __future__ import annotations

import threading
import time

import pytest

from scheduling.models import Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.quotas import quota_set
from tests.conftest import descriptor, submit
from tests.integration.conftest import wait_for, worker_log

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HOLDING = ("queued", "running")


def _agent(name: str, command: list[str]) -> dict:
    return descriptor(name=name, type="agent", walltime="10m", command=command)


def test_fifty_concurrent_submissions_against_ten_running_leave_exactly_ten_running(
    site, api, start_worker
):
    quota_set(project="materials", queue="inference-agent", resource="tasks", limit=10)
    site_view_invalidate()
    workers = [start_worker(), start_worker()]  # two processes, two dispatchers each
    ids: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def submit_some(start: int) -> None:
        from rest_framework.test import APIClient

        client = APIClient()
        client.force_authenticate(api.handler._force_user)
        for i in range(start, start + 10):
            response = submit(client, _agent(f"race-{i}", ["sleep", "120"]))
            with lock:
                if response.status_code == 201:
                    ids.append(response.json()["id"])
                else:
                    errors.append(response.content.decode())

    threads = [threading.Thread(target=submit_some, args=(i * 10,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(ids) == 50

    def settled():
        states = list(Task.objects.filter(pk__in=ids).values_list("state", flat=True))
        return states.count("pending") == 0 and states

    try:
        wait_for(settled, timeout=90, what="every task admitted or held", step=0.2)
    except AssertionError:
        raise AssertionError("\n".join(worker_log(w) for w in workers)) from None
    # Watch for a while: never more than ten hold the quota.
    for _ in range(15):
        holding = Task.objects.filter(pk__in=ids, state__in=HOLDING).count()
        assert holding <= 10
        time.sleep(0.2)
    assert Task.objects.filter(pk__in=ids, state__in=HOLDING).count() == 10
    held = Task.objects.filter(pk__in=ids, state="waiting", hold="quota")
    assert held.count() == 40
    assert held.first().reason == (
        "project materials uses 10/10 running tasks in queue inference-agent; it waits for room"
    )
    for pk in ids:  # leave nothing running behind
        api.post(f"/api/v1/tasks/{pk}/cancel/")
    wait_for(
        lambda: not Task.objects.filter(pk__in=ids, state__in=HOLDING).exists(),
        timeout=60,
        what="every task cancelled",
        step=0.2,
    )


def test_a_quota_held_task_starts_when_a_running_one_ends(site, api, start_worker):
    quota_set(project="materials", queue="inference-agent", resource="tasks", limit=1)
    site_view_invalidate()
    proc = start_worker()
    first = submit(api, _agent("first", ["sleep", "2"])).json()["id"]
    wait_for(
        lambda: Task.objects.get(pk=first).state in HOLDING, timeout=30, what="the first admitted"
    )
    second = submit(api, _agent("second", ["true"])).json()["id"]
    wait_for(
        lambda: Task.objects.get(pk=second).hold == "quota",
        timeout=30,
        what="the second held by the quota",
    )

    def ended(pk):
        task = Task.objects.get(pk=pk)
        return task if task.is_terminal else None

    try:
        done = wait_for(lambda: ended(second), timeout=60, what="the second to end")
    except AssertionError:
        raise AssertionError(worker_log(proc)) from None
    assert done.state == "succeeded"
    assert Task.objects.get(pk=first).state == "succeeded"
    assert done.started_at >= Task.objects.get(pk=first).ended_at
    messages = list(done.events.values_list("message", flat=True))
    assert any(m.startswith("held: project materials uses 1/1 running tasks") for m in messages)
    assert "released: its quota has room" in messages


def test_a_quota_held_tasks_estimate_is_its_real_start(site, api, start_worker):
    """The holder outlives its walltime (it would sleep 10 min): the local backend ends it
    at its walltime, which frees the quota; the held task's estimate, read while it waits,
    is its real start within the larger of 10 % of its wait and 60 s."""
    from datetime import datetime

    quota_set(project="materials", queue="inference-agent", resource="tasks", limit=1)
    site_view_invalidate()
    proc = start_worker()
    holder_doc = descriptor(name="holder", type="agent", walltime="80s", command=["sleep", "600"])
    holder = submit(api, holder_doc).json()["id"]
    wait_for(
        lambda: Task.objects.get(pk=holder).state == "running", timeout=30, what="holder running"
    )
    held = submit(api, _agent("held", ["true"])).json()["id"]
    wait_for(lambda: Task.objects.get(pk=held).hold == "quota", timeout=30, what="the second held")
    asked = time.time()
    wait = api.get(f"/api/v1/tasks/{held}/").json()["wait"]
    assert wait["kind"] == "quota"
    assert wait["waits_for"].startswith(f"held by quota until task #{holder} (walltime ends ")
    estimate = datetime.fromisoformat(wait["estimated_start"]).timestamp()
    try:
        started = wait_for(
            lambda: Task.objects.get(pk=held).started_at, timeout=120, what="the held one to start"
        )
    except AssertionError:
        raise AssertionError(worker_log(proc)) from None
    start = started.timestamp()
    waited = start - asked
    bound = max(0.1 * waited, 60.0)
    print(f"estimate - real start: {estimate - start:+.1f} s; waited {waited:.1f} s")
    assert waited > bound  # "it could start now" would be off by more than the bound
    assert abs(estimate - start) <= bound, (estimate - start, waited)
    assert Task.objects.get(pk=holder).reason == "walltime of 80 s exceeded: stopped"
