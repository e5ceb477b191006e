"""Allocations hold a project's new work outside their dates or over their budget, and an
approved request for more lets it start (docs/accounting.md, Allocations)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from accounting.allocation_selectors import allocation_report, today
from accounting.allocation_services import allocation_request_create, allocation_request_decide
from accounting.models import Allocation
from portal.models import Project
from scheduling import engine
from scheduling.engine.levels import policy_pass
from scheduling.models import Task
from tests.conftest import descriptor, submit
from tests.unit.accounting.test_budgets import GPU_TASK, _used

pytestmark = pytest.mark.django_db


def _allocation(name="materials 2026", *, days_left=30, started=300, **budgets) -> Allocation:
    day = today(timezone.now())
    return Allocation.objects.create(
        project=Project.objects.get(slug="materials"),
        name=name,
        starts=day - timedelta(days=started),
        ends=day + timedelta(days=days_left),
        **budgets,
    )


def _dispatched(api, name="work", **fields) -> Task:
    response = submit(api, descriptor(name=name, **fields))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    return task


def test_an_expired_allocation_holds_new_work_with_its_reason(api):
    ended = _allocation(days_left=-1)
    held = _dispatched(api)
    assert (held.state, held.hold) == ("waiting", "quota")
    assert held.reason == (
        f"allocation 'materials 2026' expired on {ended.ends:%Y-%m-%d} — a lead may request "
        "a renewal"
    )
    # Another project, without allocations, is not affected.
    other = _dispatched(api, project="climate")
    assert other.state == "queued"


def test_a_renewal_approved_lets_the_held_work_start(api, researcher, worker):
    _allocation(days_left=-1, core_hours=100)
    held = _dispatched(api)
    assert policy_pass().released == 0  # still expired: it keeps waiting
    ends = today(timezone.now()) + timedelta(days=90)
    asked = allocation_request_create(
        user=researcher,
        project="materials",
        core_hours=500,
        ends=ends,
        justification="the 2027 runs",
    )
    admin = User.objects.get(username="admin")
    allocation_request_decide(user=admin, request=asked, approve=True, comment="granted")
    fresh = asked.allocation
    assert (fresh.starts, fresh.ends, fresh.core_hours, fresh.gpu_hours) == (
        today(timezone.now()),
        ends,
        500,
        None,
    )
    assert policy_pass().released == 1
    held.refresh_from_db()
    assert held.state in ("pending", "queued")


def test_a_spent_gpu_budget_holds_gpu_work_and_more_hours_release_it(api, researcher):
    allocation = _allocation(gpu_hours=2)
    _used(api, 60, **GPU_TASK)  # 2 GPUs × 1 h: all of it
    report = allocation_report(allocation)
    assert report["state"] == "current"
    assert report["resources"] == [
        {"resource": "gpu_hours", "unit": "GPU-hours", "granted": 2, "used": 2.0, "remaining": 0.0}
    ]
    held = _dispatched(api, "more-gpu", **GPU_TASK)
    assert held.state == "waiting"
    assert held.reason == (
        "allocation 'materials 2026' has used 2.0 of its 2 GPU-hours — a lead may request more"
    )
    # CPU work counts against core-hours, which this allocation does not limit.
    cpu = _dispatched(api, "cpu", type="ai-inference", walltime="1h", resources={"cpus": 1})
    assert cpu.state == "queued"
    asked = allocation_request_create(
        user=researcher, project="materials", gpu_hours=10, justification="fine-tuning"
    )
    allocation_request_decide(user=User.objects.get(username="admin"), request=asked, approve=True)
    allocation.refresh_from_db()
    assert allocation.gpu_hours == 12
    assert policy_pass().released == 1


def test_an_allocation_not_started_yet_holds_work_until_its_first_day(api):
    _allocation("materials next", started=-3, days_left=60)
    held = _dispatched(api)
    assert held.reason.startswith("allocation 'materials next' starts on ")


def test_the_task_page_gives_no_start_estimate_for_work_its_allocation_holds(api):
    from scheduling.selectors.waiting import explain

    _allocation(days_left=-1)
    held = _dispatched(api)
    why = explain(held)
    assert (why.kind, why.estimated_start) == ("quota", None)
    assert why.message.startswith("allocation 'materials 2026' expired on ")
    assert why.waits_for.startswith("held by its project's allocation; no estimate")
