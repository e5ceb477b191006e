"""Quotas that lend in the simulator: borrowing, held work released by a lender's end, and
borrowed work reclaimed by preemption only where the queue preempts. Hand-checked."""

from __future__ import annotations

from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.sites.types import QuotaTemplate
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.engine import simulate
from simulation.simulator.model import SimJob, Site

# Every project: 4 GPUs nominal, may borrow 4 more, lends all it does not use.
LENDS = (QuotaTemplate("t", "gpus", 4, borrowing_limit=4),)


def _site(*, gpus: int = 16, preemptible: bool = False, quotas=LENDS) -> Site:
    return Site(
        pools={"g": (NodeView("g1", cpus=16, memory_mib=65536, gpus=gpus),)},
        queues={"t": QueuePolicy(name="t", pool="g", task_types=(), preemptible=preemptible)},
        quotas=quotas,
    )


def _job(key, submit, runtime, *, gpus=4, project="a", kind="ai-training") -> SimJob:
    spec = TaskSpec(
        name=key,
        project=project,
        resources=Resources(cpus=1, gpus=gpus, memory_mib=1024),
        walltime_s=runtime,
    )
    return SimJob(key, spec, kind, "t", submit, runtime)


def _starts(jobs, site) -> dict[str, tuple[float, float]]:
    run = simulate(jobs, site, "switchyard")
    assert not run.never
    return {k: (o.start, o.end) for k, o in sorted(run.outcomes.items())}


def test_a_project_over_its_quota_borrows_what_another_project_does_not_use():
    # a holds its 4; a's second borrows 4 of project c's unused 4 (c has work later, so it
    # is in the cohort); a's third would borrow 8 in all, over its limit of 4: it waits.
    jobs = [
        _job("a1", 0, 100),
        _job("a2", 1, 100),
        _job("a3", 2, 100),
        _job("c1", 500, 10, project="c"),
    ]
    got = _starts(jobs, _site())
    assert got["a1"] == (0, 100) and got["a2"] == (1, 101)
    assert got["a3"] == (100, 200)
    # Without a borrowing limit the quota holds a2 as before.
    got = _starts(jobs, _site(quotas=(QuotaTemplate("t", "gpus", 4),)))
    assert got["a2"] == (100, 200) and got["a3"] == (200, 300)


def test_held_work_starts_when_a_lender_s_own_work_ends():
    # c uses its whole quota until 50, so it lends nothing; a2 must borrow and waits. When c1
    # ends, c lends 4 and a2 starts at once, well before a's own a1 ends at 100.
    jobs = [
        _job("c1", 0, 50, project="c"),
        _job("a1", 1, 100),
        _job("a2", 2, 100),
    ]
    assert _starts(jobs, _site())["a2"] == (50, 150)


def test_a_lender_reclaims_borrowed_room_by_preemption_where_the_queue_preempts():
    # 8 GPUs: a holds 4 and borrows 4 (c is idle). c's own job, within its nominal quota,
    # finds no room: after the preempt delay (10 s) the borrowed a2 yields to it, though
    # both are at the same level; a2 runs again when c1 is done.
    jobs = [
        _job("a1", 0, 100, kind="ai-inference"),
        _job("a2", 1, 100, kind="ai-inference"),
        _job("c1", 5, 30, project="c", kind="ai-inference"),
    ]
    run = simulate(jobs, _site(gpus=8, preemptible=True), "switchyard")
    assert (run.outcomes["c1"].start, run.outcomes["c1"].end) == (15, 45)
    assert [(s.key, s.ended) for s in run.spans if s.ended != "done"] == [("a2", "preempted")]
    # Where the queue does not preempt, c1 gets the room back as the borrowed work ends.
    run = simulate(jobs, _site(gpus=8), "switchyard")
    assert run.outcomes["c1"].start == 100
    assert all(s.ended == "done" for s in run.spans)
