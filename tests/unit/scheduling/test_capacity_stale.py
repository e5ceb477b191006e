"""The capacity pass asks the backend before it stops or resubmits anything.

The portal learns of a start or an end a poll late. On that picture a pass would preempt
for a task its backend has just started, stop a second task for room a job's end has just
freed, time out a task that has just started, or run a finished task again (docs/capacity.md).
Each test changes a job in the fake backend without a poll, then runs the pass.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduling.backends import BackendError, JobState
from scheduling.backends.fake import FakeBackend
from scheduling.decisions.levels import HIGH, LOW
from scheduling.engine import get_backend
from scheduling.engine.capacity import capacity_pass
from scheduling.models import Alert, Attempt, Task
from tests.unit.scheduling.capacity_helpers import (
    INFERENCE,
    TRAINING,
    later,
    lend,
    run_on,
    submit_queued,
)

pytestmark = pytest.mark.django_db


def test_a_task_its_backend_has_started_meanwhile_preempts_nothing(api, one_inference_node):
    low = [run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001") for i in range(4)]
    high = submit_queued(api, "urgent", HIGH, **INFERENCE)
    # A job ended and the urgent task took its GPU; the portal has not polled since.
    backend = get_backend("fake")
    backend.finish(low[0].backend_id, JobState.SUCCEEDED, exit_code=0)
    backend.finish(high.backend_id, JobState.RUNNING, nodes=("inf001",))

    assert capacity_pass(later())["preempted"] == 0

    assert Task.objects.filter(preemptions__gt=0).count() == 0
    assert [c for c in backend.calls if c[0] == "cancel"] == []
    high.refresh_from_db()
    assert high.state == "running"  # the backend's word, applied at once


def test_a_victim_whose_job_has_just_ended_is_not_requeued(api, one_inference_node):
    low = [run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001") for i in range(4)]
    submit_queued(api, "urgent", HIGH, **INFERENCE)
    # The most recently started one (the victim) has just ended: its GPU is free already.
    get_backend("fake").finish(low[3].backend_id, JobState.SUCCEEDED, exit_code=0)

    assert capacity_pass(later())["preempted"] == 0
    low[3].refresh_from_db()
    assert (low[3].state, low[3].preemptions) == ("succeeded", 0)
    # The next pass decides on what runs now: the urgent task fits, nothing is stopped.
    assert capacity_pass(later(2))["preempted"] == 0
    assert Task.objects.filter(pk__in=[t.pk for t in low[:3]], state="running").count() == 3


def test_an_unreachable_backend_puts_a_preemption_off(api, one_inference_node, monkeypatch):
    for i in range(4):
        run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001")
    submit_queued(api, "urgent", HIGH, **INFERENCE)

    def unreachable(self, backend_ids):
        raise BackendError("scheduler unreachable")

    with monkeypatch.context() as patched:
        patched.setattr(FakeBackend, "poll", unreachable)
        assert capacity_pass(later())["preempted"] == 0
    assert Task.objects.filter(state="running").count() == 4
    assert capacity_pass(later(2))["preempted"] == 1  # reachable again


def test_a_task_started_since_the_last_poll_is_not_timed_out(api, site):
    task = submit_queued(api, "just-started", **INFERENCE)
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, nodes=("inf001",))
    assert capacity_pass(later(301))["startup_timeouts"] == 0
    task.refresh_from_db()
    assert (task.state, task.preemptions) == ("running", 0)
    assert not Alert.objects.filter(task=task).exists()


def test_at_the_end_of_a_lease_work_that_has_just_ended_there_is_not_run_again(api, site):
    lease = lend(1, hours=1)
    [lent] = [n.name for n in lease.nodes.all()]
    task = run_on(
        submit_queued(api, "borrower", **{**TRAINING, "walltime": "50m", "estimate": "40m"}), lent
    )
    get_backend("fake").finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)  # unpolled

    assert capacity_pass(lease.ends_at + timedelta(seconds=1))["leases_reclaimed"] == 1

    lease.refresh_from_db()
    task.refresh_from_db()
    assert (lease.state, lease.requeued) == ("ended", 0)
    assert (task.state, task.preemptions, task.attempts) == ("succeeded", 0, 1)


def test_a_stray_whose_job_has_just_ended_is_recorded_so_not_run_again(api, site):
    task = run_on(submit_queued(api, "stray", **TRAINING), "inf007")
    get_backend("fake").finish(task.backend_id, JobState.FAILED, exit_code=3)  # unpolled
    assert capacity_pass(later())["strays"] == 0
    task.refresh_from_db()
    assert (task.state, task.preemptions) == ("failed", 0)  # as it ended, not requeued
    assert Attempt.objects.get(task=task, number=1).state == "failed"


def test_a_victim_its_backend_put_back_in_its_queue_does_not_stall_preemption(
    api, one_inference_node
):
    low = [run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001") for i in range(4)]
    submit_queued(api, "urgent", HIGH, **INFERENCE)
    # Slurm requeued the most recent one (a node failure): its GPU is free, the portal
    # still shows it running.
    get_backend("fake").finish(low[3].backend_id, JobState.PENDING)

    assert capacity_pass(later())["preempted"] == 0  # its room is there already
    assert capacity_pass(later(2))["preempted"] == 0
    assert Task.objects.filter(preemptions__gt=0).count() == 0


def test_at_a_lease_end_a_job_put_back_in_its_queue_is_still_cancelled(api, site):
    lease = lend(1, hours=1)
    [lent] = [n.name for n in lease.nodes.all()]
    task = run_on(
        submit_queued(api, "borrower", **{**TRAINING, "walltime": "50m", "estimate": "40m"}), lent
    )
    get_backend("fake").finish(task.backend_id, JobState.PENDING)  # requeued by Slurm

    assert capacity_pass(lease.ends_at + timedelta(seconds=1))["leases_reclaimed"] == 1
    lease.refresh_from_db()
    assert (lease.state, lease.requeued) == ("ended", 1)
    assert get_backend("fake").jobs_for("fake")[task.key].state is JobState.CANCELLED


def test_start_up_timeouts_ask_the_backend_once_for_all_late_tasks(api, site):
    late = [submit_queued(api, f"slow{i}", **INFERENCE) for i in range(3)]
    backend = get_backend("fake")
    polls = len([c for c in backend.calls if c[0] == "poll"])

    assert capacity_pass(later(301))["startup_timeouts"] == 3

    asked = [c for c in backend.calls if c[0] == "poll"][polls:]
    assert [sorted(ids) for _, (ids,) in asked] == [sorted(t.backend_id for t in late)]


def test_a_step_that_fails_leaves_the_others_to_run_then_fails_the_pass(
    api, one_inference_node, monkeypatch
):
    """A bug in an earlier step (here, the lease reclaim) no longer skips preemption."""
    low = [run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001") for i in range(4)]
    submit_queued(api, "urgent", HIGH, **INFERENCE)

    def broken(now):
        raise RuntimeError("a bug in the lease reclaim")

    monkeypatch.setattr("scheduling.engine.capacity.reclaim_due_leases", broken)
    with pytest.raises(RuntimeError, match="a bug in the lease reclaim"):
        capacity_pass(later())
    assert sum(t.preemptions for t in Task.objects.filter(pk__in=[t.pk for t in low])) == 1
