"""The live validation day's own pieces (bench/live_day.py): the site clock it picks, the jobs
as it submits them, and how it reads the recorded run back (which trainings had room)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from bench.live_day import site_timezone
from bench.live_day_run import _mark_room_at_submit, descriptor, recorded_run
from scheduling.decisions.types import NodeAllocation
from scheduling.descriptor import load_task
from simulation.simulator.model import Outcome, Run, Span
from simulation.simulator.workloads import validation_day


@pytest.mark.parametrize("hour", [0, 3, 10, 13, 17, 23])
def test_the_site_clock_reads_mid_morning_whatever_the_hour(hour):
    now = datetime(2026, 12, 5, hour, 20, tzinfo=UTC)
    local = now.astimezone(ZoneInfo(site_timezone(now)))
    assert local.hour == 10 and local.minute == 20


def test_a_job_is_submitted_as_a_researcher_would_with_its_times_scaled():
    jobs = validation_day(1)
    training = next(j for j in jobs if j.type == "ai-training" and j.spec.resources.nodes)
    spec = load_task(descriptor(training, 0.01), fmt="json", max_bytes=1 << 20)
    assert spec.name == training.key and spec.type == "ai-training"
    assert spec.queue == "training" and spec.project == training.project
    assert spec.resources == training.spec.resources
    assert spec.walltime_s == -(-training.spec.walltime_s // 100)  # ceil of a hundredth
    assert spec.estimate_s is not None and spec.estimate_s <= spec.walltime_s
    assert spec.command == ("sleep", f"{training.runtime * 0.01:.3f}")


def _node(name: str, gpus: int = 8) -> tuple[NodeAllocation, ...]:
    return (NodeAllocation(name, 32, 0, tuple(range(gpus))),)


def _training(key: str, submit: float, start: float, node: str) -> Outcome:
    return Outcome(key, "ai-training", "p", submit, start, start + 100, start + 200, _node(node))


def test_a_training_had_room_when_enough_of_its_pools_gpus_were_free_and_none_waited():
    run = Run("switchyard")
    # From 40 to 80 every GPU of the training pool's 20 nodes is taken.
    run.spans = [Span(f"b{n}", "ai-training", 40, 80, _node(f"gpu{n:03d}")) for n in range(1, 21)]
    run.outcomes = {
        "early": _training("early", 10, 10, "gpu001"),  # an idle pool: room
        "full": _training("full", 50, 90, "gpu002"),  # every node busy: no room
        "queued": _training("queued", 85, 90, "gpu004"),  # room again, but "full" waits
        "behind": _training("behind", 95, 95, "gpu003"),  # room, nobody waiting
    }
    _mark_room_at_submit(run)
    had_room = {key: o.room_at_submit for key, o in run.outcomes.items()}
    assert had_room == {"early": True, "full": False, "queued": False, "behind": True}


@pytest.mark.django_db
def test_a_portal_with_no_tasks_reads_back_as_an_empty_run():
    run = recorded_run(0.0, 0.01)
    assert run.outcomes == {} and run.spans == [] and run.never == {}
