"""The pure policy functions: place, where a task runs (docs/architecture.md)."""

from __future__ import annotations

from scheduling.decisions import (
    NodeAllocation,
    NodeView,
    Placement,
    check,
    classify,
    free_view,
    place,
    route,
    usable_cpus,
)
from tests.unit.scheduling.decisions.helpers import (
    GIB,
    MIN,
    TIB,
    H,
    spec,
)

# ---------------------------------------------------------------- place


def test_whole_node_queue_takes_entire_idle_nodes(pools, queues):
    p = place(
        spec(gpus=32, cpus=32, nodes=4, estimate_s=5 * H), queues["training"], pools["gpu-train"]
    )
    assert p.nodes == ("gpu001", "gpu002", "gpu003", "gpu004")
    for a in p.allocations:
        assert a.whole_node
        assert a.cpus == 64
        assert a.memory_mib == TIB
        assert a.gpu_indices == tuple(range(8))


def test_whole_node_queue_skips_busy_nodes(queues):
    nodes = [
        NodeView("a", cpus=64, memory_mib=TIB, gpus=8, free_gpus=(1, 2, 3, 4, 5, 6, 7)),
        NodeView("b", cpus=64, memory_mib=TIB, gpus=8),
    ]
    p = place(spec(gpus=2, estimate_s=5 * H), queues["training"], nodes)
    assert p.nodes == ("b",)
    assert p.allocations[0].gpu_indices == tuple(range(8))


def test_whole_node_without_node_count_takes_the_fewest_nodes(queues):
    nodes = [NodeView(f"n{i}", cpus=64, memory_mib=TIB, gpus=8) for i in range(4)]
    p = place(spec(gpus=12, cpus=8, estimate_s=5 * H), queues["training"], nodes)
    assert len(p.allocations) == 2


def test_whole_node_does_not_fit_when_too_few_idle_nodes(queues):
    nodes = [
        NodeView("a", cpus=64, memory_mib=TIB, gpus=8, free_cpus=60),
        NodeView("b", cpus=64, memory_mib=TIB, gpus=8),
    ]
    assert place(spec(gpus=16, nodes=2, estimate_s=5 * H), queues["training"], nodes) is None


def test_two_small_tasks_pack_onto_the_same_node(queues):
    queue = queues["hpc"]
    nodes = [NodeView(f"n{i}", cpus=64, memory_mib=512 * GIB) for i in range(3)]
    first = place(spec(cpus=4), queue, nodes)
    assert first.nodes == ("n0",)
    nodes = [free_view(n, first.allocations) for n in nodes]
    second = place(spec(cpus=4), queue, nodes)
    assert second.nodes == ("n0",)


def test_best_fit_picks_the_fullest_node_that_still_fits(queues):
    queue = queues["hpc"]
    nodes = [
        NodeView("a", cpus=64, memory_mib=512 * GIB, free_cpus=40),
        NodeView("b", cpus=64, memory_mib=512 * GIB, free_cpus=8),
        NodeView("c", cpus=64, memory_mib=512 * GIB, free_cpus=2),
    ]
    assert place(spec(cpus=4), queue, nodes).nodes == ("b",)


def test_cpu_only_tasks_keep_off_gpu_nodes(pools, queues):
    p = place(
        spec(cpus=2, walltime_s=10 * MIN), queues["inference-agent"], pools["inference-agent"]
    )
    assert p.nodes == ("agt001",)


def test_spread_with_node_count_splits_evenly(queues):
    nodes = [NodeView(f"n{i}", cpus=64, memory_mib=512 * GIB) for i in range(4)]
    p = place(spec(cpus=128, nodes=2, memory_mib=100 * GIB), queues["hpc"], nodes)
    assert len(p.allocations) == 2
    for a in p.allocations:
        assert a.cpus == 64
        assert a.memory_mib == 100 * GIB
        assert not a.whole_node


def test_spread_without_node_count_uses_most_free_nodes_first(queues):
    nodes = [
        NodeView("a", cpus=64, memory_mib=512 * GIB, free_cpus=10),
        NodeView("b", cpus=64, memory_mib=512 * GIB, free_cpus=64),
        NodeView("c", cpus=64, memory_mib=512 * GIB, free_cpus=30),
    ]
    p = place(spec(cpus=80), queues["hpc"], nodes)
    assert [(a.node, a.cpus) for a in p.allocations] == [("b", 64), ("c", 16)]
    assert place(spec(cpus=105), queues["hpc"], nodes) is None


def test_spread_gpu_task_takes_gpus_with_cpus_on_each_node(queues):
    nodes = [NodeView(f"n{i}", cpus=32, memory_mib=256 * GIB, gpus=4) for i in range(3)]
    p = place(spec(gpus=6, cpus=4), queues["inference-agent"], nodes)
    assert [(a.node, len(a.gpu_indices)) for a in p.allocations] == [("n0", 4), ("n1", 2)]
    assert all(a.cpus >= 1 for a in p.allocations)
    assert sum(a.cpus for a in p.allocations) == 4


def test_one_node_task_does_not_spread(queues):
    nodes = [NodeView(f"n{i}", cpus=64, memory_mib=512 * GIB, free_cpus=40) for i in range(2)]
    assert place(spec(cpus=60, nodes=1), queues["hpc"], nodes) is None


def test_oversubscription_puts_four_times_the_cores_of_agent_tasks_on_a_node(queues):
    queue = queues["inference-agent"]
    nodes = [NodeView("n", cpus=32, memory_mib=256 * GIB, gpus=4)]
    allocations: list[NodeAllocation] = []
    for _ in range(128):
        view = [free_view(n, allocations) for n in nodes]
        p = place(spec(cpus=1, memory_mib=GIB, walltime_s=10 * MIN), queue, view)
        assert p is not None
        allocations.extend(p.allocations)
    view = [free_view(n, allocations) for n in nodes]
    assert view[0].free_cpus == 32 - 128
    assert usable_cpus(view[0], 4) == 0
    assert place(spec(cpus=1, memory_mib=GIB), queue, view) is None


def test_oversubscription_never_shares_gpus(queues):
    queue = queues["inference-agent"]
    node = NodeView("n", cpus=32, memory_mib=256 * GIB, gpus=4)
    allocations: list[NodeAllocation] = []
    seen: list[int] = []
    for _ in range(4):
        p = place(spec(cpus=1, gpus=1), queue, [free_view(node, allocations)])
        allocations.extend(p.allocations)
        seen.extend(p.allocations[0].gpu_indices)
    assert seen == [0, 1, 2, 3]
    assert place(spec(cpus=1, gpus=1), queue, [free_view(node, allocations)]) is None


def test_oversubscription_never_shares_memory(queues):
    queue = queues["inference-agent"]
    node = NodeView("n", cpus=32, memory_mib=256 * GIB)
    p = place(spec(cpus=1, memory_mib=200 * GIB), queue, [node])
    view = free_view(node, p.allocations)
    assert view.free_memory_mib == 56 * GIB
    assert place(spec(cpus=1, memory_mib=100 * GIB), queue, [view]) is None


def test_without_oversubscription_cores_are_not_shared(queues):
    node = NodeView("n", cpus=64, memory_mib=512 * GIB)
    view = free_view(node, [NodeAllocation("n", 64, GIB)])
    assert place(spec(cpus=1), queues["hpc"], [view]) is None


def test_gpu_indices_are_lowest_free_first(queues):
    node = NodeView("n", cpus=32, memory_mib=256 * GIB, gpus=4, free_gpus=(3, 1, 2))
    p = place(spec(cpus=1, gpus=2), queues["inference-agent"], [node])
    assert p.allocations[0].gpu_indices == (1, 2)


def test_unavailable_nodes_are_skipped(queues):
    nodes = [
        NodeView("a", cpus=64, memory_mib=512 * GIB, available=False),
        NodeView("b", cpus=64, memory_mib=512 * GIB),
    ]
    assert place(spec(cpus=4), queues["hpc"], nodes).nodes == ("b",)
    assert place(spec(cpus=4), queues["hpc"], nodes[:1]) is None
    training = [NodeView("g", cpus=64, memory_mib=TIB, gpus=8, available=False)]
    assert place(spec(gpus=8, estimate_s=5 * H), queues["training"], training) is None


def test_place_respects_gpu_model(queues):
    nodes = [
        NodeView("a", cpus=32, memory_mib=256 * GIB, gpus=4, gpu_model="A100"),
        NodeView("h", cpus=32, memory_mib=256 * GIB, gpus=4, gpu_model="H100"),
    ]
    p = place(spec(cpus=1, gpus=1, gpu_type="H100"), queues["inference-agent"], nodes)
    assert p.nodes == ("h",)


def test_free_view_counts_only_its_own_node():
    node = NodeView("n", cpus=8, memory_mib=16 * GIB, gpus=2)
    view = free_view(
        node,
        [NodeAllocation("n", 2, GIB, (1,)), NodeAllocation("other", 4, GIB, (0,))],
    )
    assert (view.free_cpus, view.free_memory_mib, view.free_gpus) == (6, 15 * GIB, (0,))
    assert not view.idle
    assert free_view(node, []).idle


def test_what_check_admits_fits_the_empty_pool(pools, queues, rules):
    cases = [
        spec(cpus=1, estimate_s=5 * MIN),
        spec(type="agent", cpus=256, nodes=1, walltime_s=H),
        spec(gpus=6, cpus=4),
        spec(cpus=300, memory_mib=8 * GIB),
        spec(cpus=256, gpus=32, nodes=4, memory_mib=512 * GIB, estimate_s=40 * H),
        spec(gpus=20, cpus=8, estimate_s=40 * H),
        spec(cpus=320, walltime_s=48 * H),
    ]
    for s in cases:
        routed = route(s, classify(s).type, rules, queues)
        queue = queues[routed.queue]
        assert check(s, queue, pools[queue.pool]) is None, s
        assert isinstance(place(s, queue, pools[queue.pool]), Placement), s
