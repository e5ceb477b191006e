"""Reservations in the scheduling pass, hand-checked (docs/policy.md, "Reservations and
backfill")."""

from __future__ import annotations

from scheduling.decisions.place import free_view
from scheduling.decisions.reserve import Busy, Plan, node_range
from scheduling.decisions.schedule import Start, Wait, WaitingJob, schedule_pass
from scheduling.decisions.types import NodeAllocation, NodeView, QueuePolicy
from scheduling.spec import Resources, TaskSpec

Q = QueuePolicy(name="hpc", pool="p", task_types=())
NODES = (NodeView("n1", cpus=4, memory_mib=16384), NodeView("n2", cpus=4, memory_mib=16384))
# A holds all of n1 until 100; B two CPUs of n2 until 50: two CPUs of n2 are free now.
A = NodeAllocation("n1", 4, 4096)
B = NodeAllocation("n2", 2, 2048)
RUNNING = {"n1": [A], "n2": [B]}
BUSY = [Busy(A, 100.0), Busy(B, 50.0)]


def _job(key, cpus, walltime, *, priority=0, seq=0):
    spec = TaskSpec(
        name=key,
        project="p",
        resources=Resources(cpus=cpus, memory_mib=1024),
        walltime_s=walltime,
    )
    return WaitingJob(key, spec, Q, priority, seq)


def _pass(jobs, **kwargs):
    decisions = schedule_pass(
        jobs,
        pools={"p": NODES},
        allocations=RUNNING,
        running={},
        now=0.0,
        busy=BUSY,
        **kwargs,
    )
    return {d.key: d for d in decisions}


def test_the_first_job_that_cannot_start_is_reserved_the_earliest_room_on_named_nodes():
    out = _pass([_job("big", 8, 60, priority=9)])
    wait = out["big"]
    assert isinstance(wait, Wait) and wait.reserved is not None
    assert wait.reserved.at == 100.0  # A's end: only then are both nodes free
    assert wait.reserved.ends == 160.0
    assert set(wait.reserved.nodes) == {"n1", "n2"}
    assert wait.reason.startswith("reserved from 1970-01-01 00:01 UTC on n1, n2 (cpus=8")


def test_work_behind_the_reservation_starts_only_where_it_leaves_it_intact():
    out = _pass(
        [
            _job("big", 8, 60, priority=9, seq=0),
            _job("long", 2, 500, seq=1),  # would still hold n2's CPUs at 100
            _job("short", 2, 30, seq=2),  # ends at 30, before the reservation
        ],
        reserve=1,  # EASY's one reservation
    )
    assert isinstance(out["long"], Wait) and out["long"].reserved is None
    assert isinstance(out["short"], Start)
    assert [a.node for a in out["short"].placement.allocations] == ["n2"]


def test_without_planned_ends_the_pass_backfills_as_before():
    decisions = schedule_pass(
        [_job("big", 8, 60, priority=9), _job("long", 2, 500, seq=1)],
        pools={"p": NODES},
        allocations=RUNNING,
        running={},
        now=0.0,
    )
    assert isinstance(decisions[0], Wait) and decisions[0].reserved is None
    assert isinstance(decisions[1], Start)


def test_behind_the_reservation_the_shortest_goes_first():
    jobs = [
        _job("big", 8, 60, priority=9, seq=0),
        _job("sixty", 2, 60, priority=5, seq=1),  # ends before 100 too, but is longer
        _job("ten", 2, 10, priority=1, seq=2),
    ]
    by_priority = _pass(jobs, reserve=1)
    assert isinstance(by_priority["sixty"], Start) and isinstance(by_priority["ten"], Wait)
    shortest = _pass(jobs, backfill="shortest", reserve=1)
    assert isinstance(shortest["ten"], Start) and isinstance(shortest["sixty"], Wait)


def test_by_default_the_first_two_that_cannot_start_are_reserved_and_backfill_keeps_both():
    out = _pass(
        [
            _job("big", 8, 60, priority=9, seq=0),  # both nodes from 100 to 160
            _job("long", 2, 500, priority=5, seq=1),  # the second: n2's room after 160
            _job("mid", 2, 130, seq=2),  # would hold n2 into big's reservation
            _job("short", 2, 30, seq=3),  # ends at 30, before both
        ]
    )
    assert out["big"].reserved is not None and out["big"].reserved.at == 100.0
    assert out["long"].reserved is not None and out["long"].reserved.at == 160.0
    assert isinstance(out["mid"], Wait) and out["mid"].reserved is None
    assert isinstance(out["short"], Start)


def test_a_reservation_of_an_earlier_pass_moves_to_a_job_now_ahead_of_it():
    plan = Plan(NODES, BUSY, now=0.0)
    plan.make("behind", _job("behind", 8, 60).spec, Q, 60.0, {n.name: n for n in NODES})
    assert [r.key for r in plan.reservations] == ["behind"]
    plan.yield_to("ahead")  # "ahead" cannot start, and "behind" was not seen before it
    assert plan.reservations == []
    plan.blocked.add("behind")
    plan.make("behind", _job("behind", 8, 60).spec, Q, 60.0, {n.name: n for n in NODES})
    plan.yield_to("later")  # "behind" came first in this pass: it keeps its reservation
    assert [r.key for r in plan.reservations] == ["behind"]


def test_work_with_no_walltime_gives_no_reservation():
    out = schedule_pass(
        [_job("big", 8, 60)],
        pools={"p": NODES},
        allocations=RUNNING,
        running={},
        now=0.0,
        busy=[Busy(A, None), Busy(B, 50.0)],  # A never ends, as far as anyone knows
    )
    assert isinstance(out[0], Wait) and out[0].reserved is None
    assert "waiting for resources in pool p" in out[0].reason


def test_node_ranges_read_as_ranges():
    assert node_range(["gpu009", "gpu007", "gpu008", "gpu010"]) == "gpu007-gpu010"
    assert node_range(["n1", "n3", "n4"]) == "n1, n3, n4"
    assert node_range(["a"]) == "a"


def test_a_later_plan_takes_a_reservation_again_only_where_nothing_that_decided_it_changed():
    free = {n.name: free_view(n, RUNNING[n.name]) for n in NODES}
    big = _job("big", 8, 60).spec
    first = Plan(NODES, BUSY, now=0.0, made={})
    made = first.make("big", big, Q, 60.0, free)
    assert made is not None and made.at == 100.0

    def again(now=10.0, runtime=60.0, busy=BUSY, before=None, room=free):
        plan = Plan(NODES, busy, now=now, made=first.kept())
        if before is not None:
            plan.make(*before)
        return plan.make("big", big, Q, runtime, room)

    assert again() is made  # B's end at 50 is as planned: nothing earlier, the same room
    # A new prediction, room still held at its start, another's reservation made before it,
    # a start already past, or work that ended before its plan: each is made anew.
    assert again(runtime=90.0).ends == 190.0
    started = NodeAllocation("n2", 1, 1024)  # started since, beside it, until 120
    room = {**free, "n2": free_view(NODES[1], [B, started])}
    assert again(busy=[*BUSY, Busy(started, 120.0)], room=room).at == 120.0
    other = _job("other", 2, 300).spec
    assert again(before=("other", other, Q, 300.0, free)) is not made
    assert again(now=100.0) is not made
    # A ended early (at 10, planned 100): room came back sooner, and so does the reservation.
    n1_empty = {**free, "n1": free_view(NODES[0], [])}
    assert again(busy=[Busy(B, 50.0)], room=n1_empty).at == 50.0
    # Without `made` (the live engine's plans) nothing is kept.
    assert Plan(NODES, BUSY, now=0.0).kept() == {}
