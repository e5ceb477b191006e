"""The site policy plans with predicted runtimes (docs/predictions.md), checked by hand: a
job's prediction is the mean of the ended runs of its work when it became ready; the walltime
still ends it; one that outlives its prediction is planned anew at that moment."""

from __future__ import annotations

from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.engine import simulate
from simulation.simulator.model import SimJob, Site
from simulation.simulator.traces import read_swf

ONE_NODE = Site(
    pools={"p": (NodeView("n1", cpus=4, memory_mib=16384),)},
    queues={"q": QueuePolicy(name="q", pool="p", task_types=())},
)


def _job(key, submit, cpus, runtime, walltime, command) -> SimJob:
    spec = TaskSpec(
        name=key,
        project="p",
        resources=Resources(cpus=cpus, memory_mib=1024),
        walltime_s=walltime,
        command=(command,),
    )
    return SimJob(key, spec, "hpc-simulation", "q", submit, runtime)


def _starts(jobs, policy="switchyard"):
    run = simulate(jobs, ONE_NODE, policy)
    return {k: (o.start, o.end) for k, o in run.outcomes.items()}


JOBS = [
    # Earlier runs: "solve" ran 10 s, "post" 5 s.
    _job("solve-1", 0, 3, 10, 1000, "solve"),
    _job("post-1", 0, 1, 5, 2000, "post"),
    # A is predicted 10 s (ends at 30 in the plan) but runs 200 s.
    _job("a", 20, 3, 200, 1000, "solve"),
    # The whole node: reserved from A's predicted end.
    _job("big", 21, 4, 10, 10, "big"),
    # Predicted 5 s: ends before the reservation, though its walltime would not.
    _job("post-2", 23, 1, 5, 2000, "post"),
    # 40 s, never run before: past the reservation at 30 until A outlives its prediction
    # there; then A is planned to the next step (60 s from its start: 80), and it fits.
    _job("e", 25, 1, 40, 40, "e"),
]


def test_plans_use_predictions_and_move_them_on_when_outlived():
    starts = _starts(JOBS)
    assert starts["a"] == (20, 220)  # the walltime, not the prediction, ends a job
    assert starts["post-2"] == (23, 28)
    assert starts["e"] == (30, 70)
    assert starts["big"] == (220, 230)


def test_easy_still_plans_by_walltime():
    starts = _starts(JOBS, "easy")
    assert starts["post-2"][0] >= 220  # its walltime (2000 s) outlasts the reservation
    assert starts["e"] == (25, 65)  # A's walltime ends at 1020: 40 s fit before


def test_swf_jobs_run_their_executable_or_their_requested_processors(tmp_path):
    trace = tmp_path / "t.swf"
    trace.write_text(
        "; two jobs\n"
        "1 0 -1 100 4 -1 -1 8 200 -1 1 3 -1 17 -1 -1 -1 -1\n"
        "2 5 -1 100 4 -1 -1 8 200 -1 1 3 -1 -1 -1 -1 -1 -1\n"
        "3 9 -1 100 4 -1 -1 -1 200 -1 1 -1 -1 -1 -1 -1 -1 -1\n"
    )
    jobs = {j.key: j for j in read_swf(trace)}
    assert jobs["swf-1"].spec.command == ("swf-executable", "17")
    assert jobs["swf-2"].spec.command == ("swf-processors", "8")
    assert jobs["swf-3"].spec.command == ("swf-processors", "4")
    assert (jobs["swf-1"].user, jobs["swf-3"].user) == ("user-3", "swf")
