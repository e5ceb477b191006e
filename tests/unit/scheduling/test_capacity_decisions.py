"""The pure capacity decisions: whom to preempt, what fits on a lease, one switch.

A fake clock: `now` is a number passed in, never read.
"""

from __future__ import annotations

from typing import Any

from scheduling.decisions import NodeAllocation, NodeView, QueuePolicy, place
from scheduling.decisions.lend import Loan, lend
from scheduling.decisions.levels import HIGH, LOW, MEDIUM
from scheduling.decisions.place import fits_before
from scheduling.decisions.preempt import NEVER_PREEMPTED, Running, whom_to_preempt
from scheduling.spec import Resources, TaskSpec

H = 3600
NOW = 1_800_000_000.0
INFERENCE = QueuePolicy(
    name="inference-agent", pool="inf", task_types=("ai-inference", "agent"), preemptible=True
)
TRAINING = QueuePolicy(
    name="training", pool="gpu", task_types=("ai-training",), allocation="whole-node"
)


def spec(
    *, gpus: int = 1, cpus: int = 1, nodes: int | None = None, walltime_s: int | None = H, **kw: Any
) -> TaskSpec:
    res = Resources(cpus=cpus, gpus=gpus, memory_mib=1024, nodes=nodes)
    return TaskSpec(name="t", project="p", resources=res, walltime_s=walltime_s, **kw)


def node(name: str = "inf001", *, gpus: int = 4, **kw: Any) -> NodeView:
    return NodeView(name=name, cpus=32, memory_mib=256 * 1024, gpus=gpus, **kw)


def running(
    key: str,
    *,
    level: int = LOW,
    gpus: tuple[int, ...] = (0,),
    on: str = "inf001",
    task_type: str = "ai-inference",
    preemptible: bool = True,
    started_at: float = NOW - 60,
) -> Running:
    alloc = NodeAllocation(node=on, cpus=1, memory_mib=1024, gpu_indices=gpus)
    return Running(key, task_type, level, preemptible, (alloc,), started_at)


# -- whom to preempt ------------------------------------------------------------------------


def test_nothing_is_preempted_when_the_task_fits():
    assert whom_to_preempt(spec(), INFERENCE, HIGH, [node()], [running("a")], now=NOW) is None


def test_the_lowest_level_victim_is_taken_and_only_as_many_as_needed():
    full = [
        running("a", level=MEDIUM, gpus=(0,)),
        running("b", level=LOW, gpus=(1,)),
        running("c", level=LOW, gpus=(2,)),
        running("d", level=MEDIUM, gpus=(3,)),
    ]
    decision = whom_to_preempt(spec(gpus=1), INFERENCE, HIGH, [node()], full, now=NOW)
    assert decision is not None
    assert len(decision.victims) == 1 and decision.victims[0] in {"b", "c"}
    assert decision.placement.allocations[0].gpu_indices == (int(decision.victims[0] == "c") + 1,)
    assert "1 low-level preemptible task(s)" in decision.reason
    assert decision.reason.endswith("to start a high-level task")


def test_among_equals_the_most_recently_started_goes_first():
    full = [running(k, gpus=(i,), started_at=NOW - 100 * (4 - i)) for i, k in enumerate("abcd")]
    decision = whom_to_preempt(spec(gpus=1), INFERENCE, HIGH, [node()], full, now=NOW)
    assert decision.victims == ("d",)


def test_two_gpus_free_two_victims_and_spare_a_moot_one():
    # The low-level one-GPU task on another node cannot help a two-GPU task on inf001.
    full = [
        running("a", gpus=(0, 1)),
        running("b", level=MEDIUM, gpus=(2, 3)),
        running("elsewhere", on="inf002", gpus=(0,)),
    ]
    nodes = [node(), node("inf002", gpus=1)]
    decision = whom_to_preempt(spec(gpus=2), INFERENCE, HIGH, nodes, full, now=NOW)
    assert decision.victims == ("a",)


def test_a_victim_that_turns_out_unneeded_is_spared():
    # Lowest first takes "x" (1 GPU on inf002), which does not make room for 4 GPUs; "y"
    # (all of inf001) does, and "x" is then spared.
    full = [
        running("x", level=LOW, on="inf002", gpus=(0,)),
        running("kept", on="inf002", gpus=(1, 2), preemptible=False),
        running("y", level=MEDIUM, gpus=(0, 1, 2, 3)),
    ]
    nodes = [node(), node("inf002", gpus=4)]
    decision = whom_to_preempt(spec(gpus=4), INFERENCE, HIGH, nodes, full, now=NOW)
    assert decision.victims == ("y",)


def test_for_gpu_work_only_victims_on_gpu_nodes_count_even_cpu_only_ones():
    # inf001's GPUs are free but its cores are all taken by a CPU-only task; the agent node's
    # low-level task is more recent, yet stopping it could never help.
    cpu_hog = Running(
        "hog", "agent", LOW, True, (NodeAllocation("inf001", 32, 1024, ()),), NOW - 100
    )
    elsewhere = Running(
        "agt", "agent", LOW, True, (NodeAllocation("agt001", 64, 1024, ()),), NOW - 1
    )
    nodes = [node(), NodeView(name="agt001", cpus=64, memory_mib=512 * 1024)]
    decision = whom_to_preempt(spec(), INFERENCE, HIGH, nodes, [cpu_hog, elsewhere], now=NOW)
    assert decision.victims == ("hog",)


def test_training_and_hpc_are_never_preempted_whatever_their_queue_says():
    assert {"ai-training", "hpc-simulation"} == NEVER_PREEMPTED
    full = [
        running(k, gpus=(i,), task_type=t)
        for i, (k, t) in enumerate(
            [
                ("a", "ai-training"),
                ("b", "hpc-simulation"),
                ("c", "ai-training"),
                ("d", "hpc-simulation"),
            ]
        )
    ]
    assert whom_to_preempt(spec(), INFERENCE, HIGH, [node()], full, now=NOW) is None


def test_work_in_a_non_preemptible_queue_or_at_the_same_level_stays():
    full = [running(k, gpus=(i,), preemptible=False) for i, k in enumerate("abcd")]
    assert whom_to_preempt(spec(), INFERENCE, HIGH, [node()], full, now=NOW) is None
    same = [running(k, gpus=(i,), level=HIGH) for i, k in enumerate("abcd")]
    assert whom_to_preempt(spec(), INFERENCE, HIGH, [node()], same, now=NOW) is None


def test_nothing_is_preempted_when_even_all_victims_would_not_make_room():
    full = [running("a", gpus=(0, 1, 2, 3))]
    assert whom_to_preempt(spec(gpus=5), INFERENCE, HIGH, [node()], full, now=NOW) is None
    drained = [node(available=False)]
    assert whom_to_preempt(spec(), INFERENCE, HIGH, drained, full, now=NOW) is None


# -- what fits on a lease ----------------------------------------------------------------------


def test_a_lent_node_takes_only_work_whose_walltime_ends_before_the_lease():
    lent = [node("inf001", available_until=NOW + 4 * H)]
    assert place(spec(walltime_s=4 * H), INFERENCE, lent, now=NOW) is not None
    assert place(spec(walltime_s=4 * H + 1), INFERENCE, lent, now=NOW) is None
    assert place(spec(walltime_s=None), INFERENCE, lent, now=NOW) is None  # no end: no lease
    assert place(spec(), INFERENCE, lent) is None  # no clock: lent nodes do not count
    # An hour later the same task no longer fits.
    assert place(spec(walltime_s=4 * H), INFERENCE, lent, now=NOW + H) is None


def test_lend_moves_nodes_to_the_borrowing_pool_with_the_lease_end():
    pools = {"inf": [node("inf001"), node("inf002")], "gpu": [node("gpu001", gpus=8)]}
    moved = lend(pools, {"inf002": Loan("gpu", NOW + H)})
    assert [n.name for n in moved["inf"]] == ["inf001"]
    assert sorted((n.name, n.available_until) for n in moved["gpu"]) == [
        ("gpu001", None),
        ("inf002", NOW + H),
    ]
    assert lend(pools, {}) == {k: list(v) for k, v in pools.items()}


def test_fits_before():
    assert fits_before(spec(walltime_s=10), None, None)
    assert fits_before(spec(walltime_s=10), NOW + 10, NOW)
    assert not fits_before(spec(walltime_s=11), NOW + 10, NOW)


def test_a_lent_node_and_an_own_node_mix():
    nodes = [node("own", gpus=4), node("lent", gpus=4, available_until=NOW + H)]
    whole = spec(gpus=8, cpus=64, nodes=2, walltime_s=2 * H)
    assert place(whole, TRAINING, nodes, now=NOW) is None
    inside = spec(gpus=8, cpus=64, nodes=2, walltime_s=H)
    assert {a.node for a in place(inside, TRAINING, nodes, now=NOW).allocations} == {"own", "lent"}


# -- topology -----------------------------------------------------------------------------


def test_multi_node_training_goes_under_one_switch_when_one_has_room():
    nodes = [
        node("a1", switch="sw1"),
        node("b1", switch="sw2"),
        node("b2", switch="sw2"),
        node("a2", switch="sw1", available=False),
    ]
    placement = place(spec(gpus=8, cpus=64, nodes=2), TRAINING, nodes, now=NOW)
    assert {a.node for a in placement.allocations} == {"b1", "b2"}
    assert placement.note == ""


def test_across_switches_only_when_no_switch_has_room_and_it_says_so():
    nodes = [node("a1", switch="sw1"), node("b1", switch="sw2")]
    placement = place(spec(gpus=8, cpus=64, nodes=2), TRAINING, nodes, now=NOW)
    assert {a.node for a in placement.allocations} == {"a1", "b1"}
    assert placement.note == "placed across 2 switches: no switch has 2 free nodes for it"
