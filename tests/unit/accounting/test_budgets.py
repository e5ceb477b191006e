"""Budget quotas: GPU-hours and core-hours per period, from the usage records and what
running tasks have used so far, with the concurrent quotas' queue-or-reject behaviour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from accounting.budget import period_start
from accounting.meter import meter
from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.models import Attempt, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.quotas import quota_set
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

GPU_TASK = {"type": "ai-inference", "walltime": "1h", "resources": {"cpus": 1, "gpus": 2}}


def _task(api, name: str, **fields) -> Task:
    response = submit(api, descriptor(name=name, **fields))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


def _used(api, minutes: int, **fields) -> Task:
    """A task that ran `minutes` ending a minute ago, metered."""
    task = _task(api, "used", **fields)
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    end = timezone.now() - timedelta(minutes=1)
    get_backend("fake").finish(
        task.backend_id, JobState.RUNNING, at=end - timedelta(minutes=minutes)
    )
    get_backend("fake").finish(task.backend_id, JobState.SUCCEEDED, exit_code=0, at=end)
    engine.backend_poll("fake")
    meter(Attempt.objects.filter(task=task).values_list("pk", flat=True))
    return task


def test_over_its_gpu_hour_budget_gpu_work_waits_and_cpu_work_does_not(api):
    quota_set(project="materials", queue="inference-agent", resource="gpu_hours", limit=2)
    site_view_invalidate()
    _used(api, 60, **GPU_TASK)  # 2 GPUs × 1 h: the whole budget
    held = _task(api, "more-gpu", **GPU_TASK)
    assert engine.task_dispatch(held.pk) == "held"
    held.refresh_from_db()
    assert (held.state, held.hold) == ("waiting", "quota")
    assert held.reason == (
        "project materials used 2/2 GPU-hours in queue inference-agent this month; it waits "
        "for the next period or a larger budget"
    )
    cpu_only = _task(api, "cpu-only", type="ai-inference", walltime="1h", resources={"cpus": 1})
    engine.task_dispatch(cpu_only.pk)
    cpu_only.refresh_from_db()
    assert cpu_only.state == "queued"
    # A larger budget releases it at the next policy pass.
    quota_set(project="materials", queue="inference-agent", resource="gpu_hours", limit=10)
    site_view_invalidate()
    from scheduling.engine.levels import policy_pass

    assert policy_pass().released == 1


def test_running_work_counts_against_the_budget_as_it_runs(api):
    quota_set(project="materials", queue="inference-agent", resource="gpu_hours", limit=3)
    site_view_invalidate()
    running = _task(api, "long", **GPU_TASK)
    engine.task_dispatch(running.pk)
    running.refresh_from_db()
    get_backend("fake").finish(
        running.backend_id, JobState.RUNNING, at=timezone.now() - timedelta(minutes=100)
    )
    engine.backend_poll("fake")
    rows = api.get("/api/v1/projects/materials/quotas/").json()
    [budget] = [r for r in rows if r["resource"] == "gpu_hours"]
    assert budget["used"] >= 3.3 and budget["period"] == "month"
    assert budget["text"].startswith("project materials used 3.3")
    assert engine.task_dispatch(_task(api, "next", **GPU_TASK).pk) == "held"


def test_a_reject_budget_refuses_at_submit_naming_the_field(api):
    quota_set(
        project="materials",
        queue="hpc",
        resource="core_hours",
        limit=1,
        over_quota="reject",
        period="day",
    )
    site_view_invalidate()
    _used(api, 30, type="hpc-simulation", walltime="1h", resources={"cpus": 4})  # 2 core-hours
    response = submit(api, descriptor(name="over", type="hpc-simulation", resources={"cpus": 1}))
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert error["field"] == "resources.cpus"
    assert error["message"] == (
        "project materials used 2/1 core-hours in queue hpc today; this budget refuses more work"
    )


def test_period_starts_in_the_site_time_zone(settings):
    settings.SWITCHYARD_SITE_TIMEZONE = "Asia/Shanghai"
    now = datetime(2026, 12, 2, 17, 0, tzinfo=UTC)  # Thursday 3 December 01:00 in Shanghai
    assert period_start("day", now).isoformat() == "2026-12-03T00:00:00+08:00"
    assert period_start("week", now).isoformat() == "2026-11-30T00:00:00+08:00"
    assert period_start("month", now).isoformat() == "2026-12-01T00:00:00+08:00"
