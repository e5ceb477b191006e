"""The local backend plans running work by its predicted runtime (docs/predictions.md): a
job with a short prediction frees room early in the plan, so backfill may use it; once the
job outlives its prediction, its planned end moves on at the next pass."""

from __future__ import annotations

import dataclasses
import time

from scheduling.backends.base import JobState
from scheduling.decisions.types import NodeView
from tests.unit.scheduling.local_backend.helpers import finished, request, running

PREDICTED_S = 3.0


def predicted(key, command, runtime_s, **kwargs):
    return dataclasses.replace(request(key, command, **kwargs), planned_runtime_s=runtime_s)


def test_plans_use_the_prediction_and_correct_it_once_outlived(make):
    # The node's 4 CPUs: A holds 3, walltime 1 h, predicted to end 3 s after its start; the
    # 4-CPU job is reserved the node from then. One CPU is free now.
    backend = make([NodeView("n1", cpus=4, memory_mib=16384)])
    started = time.monotonic()  # A starts after this: its predicted end is 3 s past it or later
    backend.submit(predicted("pr-a", ["sleep", "30"], PREDICTED_S, cpus=3, walltime_s=3600))
    assert running(backend, "pr-a").state is JobState.RUNNING
    big = backend.submit(request("pr-big", ["true"], cpus=4, walltime_s=60))
    assert big.reason.startswith("reserved from "), big.reason
    # Planned by its walltime (1 h) it would outlast the reservation: it waits.
    unknown = backend.submit(request("pr-unknown", ["sleep", "30"], walltime_s=3600))
    assert unknown.state is JobState.PENDING
    # Predicted 20 s: past A's predicted end, so it waits while A's prediction holds.
    later = backend.submit(predicted("pr-later", ["sleep", "30"], 20.0, walltime_s=3600))
    # pr-unknown's walltime, but predicted to end before the reservation: it passes.
    quick = backend.submit(predicted("pr-quick", ["true"], 0.1, walltime_s=3600))
    assert time.monotonic() - started < PREDICTED_S, "too slow to see A's prediction hold"
    assert later.state is JobState.PENDING, later.reason
    assert finished(backend, "pr-quick").state is JobState.SUCCEEDED, quick.reason
    # Past 3 s A still runs: its end is planned at the next correction step (60 s after
    # its start), the reservation moves there, and the 20-s job now ends before it (the
    # polls below run the passes that see it).
    time.sleep(max(0.0, PREDICTED_S - (time.monotonic() - started)) + 0.2)
    assert running(backend, "pr-later", timeout=5.0).state is JobState.RUNNING
    assert backend.poll(["pr-unknown"])["pr-unknown"].state is JobState.PENDING
    assert backend.poll(["pr-big"])["pr-big"].state is JobState.PENDING
