"""An image's pull is not metered: on Slurm the Prolog pulls inside the job's allocation, so
sacct's elapsed time includes it; the meter (and reconciliation) take the attempt's recorded
`pull_seconds` off (docs/accounting.md). A backend whose job waits for its image before it
starts (the local one) reports an elapsed time without the pull: nothing is taken off."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from accounting import metrics
from accounting.meter import meter
from accounting.reconcile import reconcile
from scheduling.backends.fake import FakeBackend
from scheduling.backends.slurm.usage import SlurmUsage
from scheduling.models import Attempt
from tests.unit.accounting.test_metering import T0, _records, _run

pytestmark = pytest.mark.django_db

MINUTE_MS = 60_000


@pytest.fixture
def pull_in_elapsed(monkeypatch):
    """The fake backend accounts its jobs as Slurm does: elapsed from the Prolog's start."""
    runs = FakeBackend._runs

    def slurm_like(self, cluster, job):
        return [dataclasses.replace(r, pull_in_elapsed=True) for r in runs(self, cluster, job)]

    monkeypatch.setattr(FakeBackend, "_runs", slurm_like)


def _pulled(task, seconds: float | None) -> Attempt:
    Attempt.objects.filter(task=task).update(pull_seconds=seconds)
    return Attempt.objects.get(task=task)


def test_the_pull_inside_a_slurm_jobs_elapsed_time_is_not_metered(api, pull_in_elapsed):
    # 30 minutes from the Prolog's start to the end, 6 of them pulling the image.
    task = _run(api, minutes=30, name="img", type="ai-inference", resources={"cpus": 4, "gpus": 2})
    attempt = _pulled(task, 6 * 60.0)
    meter([attempt.pk])
    ran = 24 * MINUTE_MS
    assert _records(task)["cpu"] == 4 * ran and _records(task)["gpu"] == 2 * ran
    # A task with no image (no pull recorded) is metered for all its elapsed time.
    plain = _run(api, minutes=30, name="plain", type="ai-inference", resources={"cpus": 4})
    meter([_pulled(plain, None).pk])
    assert _records(plain)["cpu"] == 4 * 30 * MINUTE_MS
    # Reconciliation reads sacct's runs the same way: no difference.
    result = reconcile("fake", T0, T0 + timedelta(hours=1))
    assert (result.outcome, result.jobs, result.differences) == ("clean", 2, 0), result.details


def test_a_backend_whose_elapsed_leaves_the_pull_out_is_metered_as_it_says(api):
    task = _run(api, minutes=30, name="local-img", type="hpc-simulation", resources={"cpus": 2})
    meter([_pulled(task, 6 * 60.0).pk])
    assert _records(task)["cpu"] == 2 * 30 * MINUTE_MS


def test_a_pull_longer_than_a_run_takes_the_rest_off_the_next_and_never_below_zero():
    runs = [metrics.RunUsage(1, 0, 0, 1000), metrics.RunUsage(1, 0, 0, 5000)]
    assert [r.elapsed_ms for r in metrics.without_pull(runs, 2500)] == [0, 3500]
    assert [r.elapsed_ms for r in metrics.without_pull(runs, 60_000)] == [0, 0]
    assert [r.elapsed_ms for r in metrics.without_pull(runs, 0)] == [1000, 5000]


def test_slurms_runs_say_their_elapsed_time_includes_the_pull():
    class Sacct(SlurmUsage):
        def run(self, argv, **kw):
            return "41|COMPLETED|90|cpu=2,mem=1G,node=1|1700000000|1700000090|sy-x-1|\n"

    [(state, run)] = Sacct()._sacct_usage([])
    assert state == "COMPLETED" and run.elapsed_ms == 90_000 and run.pull_in_elapsed
