"""Metering and reconciliation on the fake backend: exactly once, priced, reconciled.

The fake backend's jobs run when and for as long as the test says (`finish(..., at=)`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.utils import timezone

from accounting import metrics
from accounting.meter import meter, meter_pass, write
from accounting.models import Metered, Rate, Reconciliation, UsageDaily, UsageRecord
from accounting.reconcile import reconcile
from scheduling import engine
from scheduling.backends import BackendError, JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import get_backend
from scheduling.engine.capacity import requeue
from scheduling.models import Alert, Attempt, Queue, Task
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)


def _run(api, *, minutes: float, start: datetime = T0, end_state=JobState.SUCCEEDED, **fields):
    response = submit(api, descriptor(**fields))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    fake = get_backend("fake")
    fake.finish(task.backend_id, JobState.RUNNING, at=start)
    fake.finish(task.backend_id, end_state, exit_code=0, at=start + timedelta(minutes=minutes))
    engine.backend_poll("fake")
    task.refresh_from_db()
    return task


def _records(task: Task) -> dict[str, int]:
    return dict(UsageRecord.objects.filter(task=task).values_list("metric", "quantity"))


def test_an_ended_attempt_is_metered_once_from_what_it_was_allocated(api):
    task = _run(
        api, minutes=30, name="sim", type="hpc-simulation", resources={"cpus": 8, "memory": "4Gi"}
    )
    attempt = Attempt.objects.get(task=task)
    assert meter([attempt.pk]) == 2
    half_hour_ms = 30 * 60 * 1000
    assert _records(task) == {"cpu": 8 * half_hour_ms, "memory": 4096 * half_hour_ms}
    record = UsageRecord.objects.get(task=task, metric="cpu")
    assert metrics.shown(record.quantity, "cpu") == Decimal(4)  # core-hours
    assert (record.queue, record.pool, record.task_type, record.project.slug) == (
        "hpc",
        "cpu-hpc",
        "hpc-simulation",
        "materials",
    )
    assert record.user.username == "alice" and record.source == "fake"
    assert (record.started_at, record.ended_at, record.day) == (
        T0,
        T0 + timedelta(minutes=30),
        T0.date(),
    )
    # HPC is charged per core-hour: 4 core-hours at the default site's 0.06.
    assert record.charge == 240_000 and record.rate.price == Decimal("0.06")
    assert UsageRecord.objects.get(task=task, metric="memory").charge == 0  # no memory price

    # Replays write nothing: the hook again, the pass, another worker's write.
    assert meter([attempt.pk]) == 0
    assert meter_pass(T0 + timedelta(hours=1))["records"] == 0
    assert write(attempt, [_fake_run(8, 30)]) == 0
    assert UsageRecord.objects.filter(task=task).count() == 2
    daily = UsageDaily.objects.get(metric="cpu")
    assert (daily.quantity, daily.charge, daily.records) == (8 * half_hour_ms, 240_000, 1)


def _fake_run(cpus: int, minutes: int):
    from scheduling.backends import Run

    return Run("x", "x", cpus, 0, 0, 1, minutes * 60_000, T0, T0 + timedelta(minutes=minutes))


def test_agents_are_metered_in_instance_minutes_and_gpus_in_gpu_hours(api):
    agent = _run(api, minutes=3, name="agent", type="agent", resources={"cpus": 1})
    infer = _run(
        api, minutes=90, name="infer", type="ai-inference", resources={"cpus": 2, "gpus": 2}
    )
    meter(Attempt.objects.values_list("pk", flat=True))
    assert metrics.shown(_records(agent)["instance"], "instance") == 3
    assert "instance" not in _records(infer)
    gpu = UsageRecord.objects.get(task=infer, metric="gpu")
    assert metrics.shown(gpu.quantity, "gpu") == 3  # 2 GPUs × 1.5 h
    assert gpu.charge == 24_000_000  # 3 GPU-hours at 8.00
    assert UsageRecord.objects.get(task=agent, metric="instance").charge == 60_000  # 3 × 0.02


def test_a_batch_is_metered_in_one_go_and_each_attempt_once_when_another_worker_races(
    api, monkeypatch, django_assert_max_num_queries
):
    tasks = [
        _run(api, minutes=10 + i, name=f"t{i}", type="hpc-simulation", resources={"cpus": 1})
        for i in range(6)
    ]
    attempts = [Attempt.objects.get(task=t).pk for t in tasks]
    # One batch: the same few queries for three attempts as for one.
    with django_assert_max_num_queries(12):
        assert meter(attempts[:3]) == 6  # cpu and memory each
    # Another worker meters attempts[4] between this one's read and its write: the batch
    # fails on it and each attempt is then written alone, that one not twice.
    from accounting import meter as meter_module

    real_runs_of = meter_module.usage.runs_of

    def racing_runs_of(found):
        runs = real_runs_of(found)
        other = next(a for a in found if a.pk == attempts[4])
        assert write(Attempt.objects.get(pk=other.pk), runs[other.pk]) == 2
        return runs

    monkeypatch.setattr(meter_module.usage, "runs_of", racing_runs_of)
    assert meter(attempts) == 4  # attempts[3] and [5]; [0..2] were done, [4] by the other
    assert UsageRecord.objects.count() == 12
    assert Metered.objects.count() == 6
    daily = UsageDaily.objects.get(metric="cpu")
    assert (daily.quantity, daily.records) == (sum(10 + i for i in range(6)) * 60_000, 6)


def test_the_batchs_rates_are_rate_for_over_one_read(site):
    from accounting.meter import RateBook, rate_for

    hpc = Queue.objects.get(name="hpc")
    own = Rate.objects.filter(queue=hpc, metric="cpu").first()
    assert own is not None
    Rate.objects.filter(pk=own.pk).update(valid_until=T0 + timedelta(hours=1))
    Rate.objects.create(
        queue=hpc, metric="cpu", price=Decimal("0.10"), valid_from=T0 + timedelta(hours=1)
    )
    Rate.objects.create(
        queue=None, metric="gpu", price=Decimal("9"), valid_from=T0 + timedelta(days=1)
    )
    book = RateBook()
    for queue in Queue.objects.all():
        for metric in metrics.METRICS:
            for at in (
                T0 - timedelta(days=3650),
                T0,
                T0 + timedelta(hours=2),
                T0 + timedelta(days=2),
            ):
                assert book.valid(queue.pk, metric, at) == rate_for(queue.pk, metric, at), (
                    queue.name,
                    metric,
                    at,
                )
    assert book.valid(None, "gpu", T0 + timedelta(days=2)) == rate_for(
        None, "gpu", T0 + timedelta(days=2)
    )


def test_a_job_still_running_is_not_metered_until_it_ends(api):
    response = submit(api, descriptor(name="long"))
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, at=T0)
    engine.backend_poll("fake")
    attempt = Attempt.objects.get(task=task)
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=timezone.now())  # a confused hook
    assert meter([attempt.pk]) == 0 and not Metered.objects.exists()


def test_a_preempted_attempt_and_its_rerun_are_each_billed_for_what_they_ran(api):
    task = _run(
        api,
        minutes=10,
        name="infer",
        type="ai-inference",
        resources={"cpus": 1, "gpus": 1},
        end_state=JobState.RUNNING,
    )
    assert task.state == "running"
    fake = get_backend("fake")
    first_key = task.backend_id
    assert requeue(task, reason="preempted by a test")
    # The cancel the requeue made ended the job now; make its end the test's clock.
    FakeBackend._cluster("fake").jobs[first_key] = (
        FakeBackend._cluster("fake")
        .jobs[first_key]
        .__class__(
            **{
                **_job_fields(fake.jobs_for("fake")[first_key]),
                "ended_at": T0 + timedelta(minutes=10),
            }
        )
    )
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    fake.finish(task.backend_id, JobState.RUNNING, at=T0 + timedelta(minutes=20))
    fake.finish(task.backend_id, JobState.SUCCEEDED, exit_code=0, at=T0 + timedelta(minutes=25))
    engine.backend_poll("fake")
    assert meter_pass(T0 + timedelta(hours=1))["records"] == 6  # cpu, gpu, memory each
    by_attempt = {
        n: dict(
            UsageRecord.objects.filter(attempt__number=n, metric="gpu").values_list(
                "metric", "quantity"
            )
        )
        for n in (1, 2)
    }
    assert by_attempt == {1: {"gpu": 10 * 60_000}, 2: {"gpu": 5 * 60_000}}


def _job_fields(job) -> dict:
    return {f: getattr(job, f) for f in job.__dataclass_fields__}


def test_a_new_price_applies_from_its_date_and_never_reprices_the_past(api):
    queue = Queue.objects.get(name="hpc")
    with pytest.raises(ValidationError, match="the past stays as charged"):
        Rate(queue=queue, metric="cpu", price=Decimal("1"), valid_from=T0).full_clean()
    old = Rate.objects.get(queue=queue, metric="cpu")
    change = T0 + timedelta(hours=1)
    Rate.objects.filter(pk=old.pk).update(valid_until=change)
    Rate.objects.create(queue=queue, metric="cpu", price=Decimal("0.10"), valid_from=change)
    before = _run(api, minutes=59, name="before", type="hpc-simulation", resources={"cpus": 1})
    after = _run(
        api, minutes=60, start=change, name="after", type="hpc-simulation", resources={"cpus": 1}
    )
    meter(Attempt.objects.values_list("pk", flat=True))
    assert UsageRecord.objects.get(task=before, metric="cpu").charge == 59_000
    assert UsageRecord.objects.get(task=after, metric="cpu").charge == 100_000


# -- reconciliation ---------------------------------------------------------------------------


def test_reconciliation_is_clean_when_every_job_is_billed_as_accounted(api):
    for i in range(3):
        _run(api, minutes=5 + i, name=f"t{i}", type="hpc-simulation", resources={"cpus": 2})
    meter(Attempt.objects.values_list("pk", flat=True))
    result = reconcile("fake", T0, T0 + timedelta(hours=1))
    assert (result.outcome, result.jobs, result.differences) == ("clean", 3, 0)
    assert not Alert.objects.filter(kind="usage").exists()


def test_reconciliation_finds_missing_extra_and_mismatched_and_alerts_once(api):
    tasks = [
        _run(api, minutes=5, name=f"t{i}", type="hpc-simulation", resources={"cpus": 2})
        for i in range(3)
    ]
    meter(Attempt.objects.values_list("pk", flat=True))
    UsageRecord.objects.filter(task=tasks[0]).delete()  # lost
    UsageRecord.objects.filter(task=tasks[1], metric="cpu").update(quantity=1)  # wrong
    phantom = UsageRecord.objects.get(task=tasks[2], metric="cpu")
    phantom.pk, phantom.key = None, "sy-9-x-1:cpu"  # billed, but no such job
    phantom.save()
    result = reconcile("fake", T0, T0 + timedelta(hours=1))
    assert result.outcome == "differences"
    assert (result.missing, result.mismatched, result.extra) == (1, 1, 1), result.details
    kinds = {(d["kind"], d.get("metric")) for d in result.details}
    assert ("mismatched", "cpu") in kinds
    assert Alert.objects.filter(kind="usage").count() == 1
    reconcile("fake", T0, T0 + timedelta(hours=1))  # the same again: no second alert
    assert Alert.objects.filter(kind="usage").count() == 1


def test_an_unreadable_accounting_fails_the_run_and_the_next_one_converges(api, monkeypatch):
    _run(api, minutes=5, name="t", type="hpc-simulation", resources={"cpus": 2})

    def down(self, start, end):
        raise BackendError("slurmdbd is not answering")

    monkeypatch.setattr(FakeBackend, "accounted", down)
    failed = reconcile("fake", T0, T0 + timedelta(hours=1))
    assert failed.outcome == "failed" and "slurmdbd is not answering" in failed.error
    assert Alert.objects.filter(kind="usage").count() == 1
    monkeypatch.undo()
    meter_pass(T0 + timedelta(hours=1))
    assert reconcile("fake", T0, T0 + timedelta(hours=1)).outcome == "clean"
    assert Reconciliation.objects.count() == 2
    total = UsageRecord.objects.aggregate(s=Sum("quantity"))["s"]
    assert total == 2 * 5 * 60_000 + 1024 * 5 * 60_000
