"""The pure policy functions: classify, route, check, place (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.decisions import (
    ClassifierPolicy,
    NodeAllocation,
    NodeView,
    Placement,
    QueuePolicy,
    Refused,
    Routed,
    RoutingRuleView,
    check,
    classify,
    format_duration,
    format_memory,
    free_view,
    place,
    pool_capacity,
    route,
    usable_cpus,
)
from scheduling.sites import default_site
from scheduling.spec import Resources, TaskSpec

MIN = 60
H = 3600
GIB = 1024
TIB = 1024 * GIB


def spec(
    *,
    cpus: int = 1,
    gpus: int = 0,
    memory_mib: int = GIB,
    nodes: int | None = None,
    gpu_type: str | None = None,
    **kw: Any,
) -> TaskSpec:
    res = Resources(cpus=cpus, gpus=gpus, memory_mib=memory_mib, nodes=nodes, gpu_type=gpu_type)
    return TaskSpec(name="t", project="p", resources=res, **kw)


@pytest.fixture
def pools() -> dict[str, list[NodeView]]:
    """The default site's nodes by pool (scheduling/sites/default.py, what seed_demo writes)."""
    return default_site().nodes_by_pool()


@pytest.fixture
def queues() -> dict[str, QueuePolicy]:
    return default_site().queues_by_name()


@pytest.fixture
def rules() -> list[RoutingRuleView]:
    return list(default_site().rules)


# ---------------------------------------------------------------- units in reasons


def test_durations_and_memory_read_in_researcher_units():
    assert format_duration(72 * H) == "72h"
    assert format_duration(90 * MIN) == "1h30min"
    assert format_duration(30 * MIN) == "30min"
    assert format_duration(45) == "45s"
    assert format_memory(TIB) == "1 TiB"
    assert format_memory(256 * GIB) == "256 GiB"
    assert format_memory(1536) == "1.5 GiB"
    assert format_memory(512) == "512 MiB"


# ---------------------------------------------------------------- classify


def test_declared_type_wins_over_shape():
    c = classify(spec(type="hpc-simulation", gpus=32, estimate_s=40 * H))
    assert c.type == "hpc-simulation"
    assert c.reason == "declared type hpc-simulation"


def test_sandbox_is_only_ever_declared():
    assert classify(spec(type="sandbox")).type == "sandbox"
    assert classify(spec(cpus=1, estimate_s=60)).type == "agent"


def test_many_gpus_with_long_estimate_is_training():
    c = classify(spec(gpus=32, cpus=256, estimate_s=40 * H))
    assert c.type == "ai-training"
    assert c.reason == "no type given; 32 GPUs (≥ 2) and estimate 40h (> 2h) → ai-training"


def test_two_gpus_is_many_the_seeds_multi_card():
    assert classify(spec(gpus=2, estimate_s=3 * H)).type == "ai-training"
    assert classify(spec(gpus=1, estimate_s=3 * H)).type == "ai-inference"


def test_estimate_of_exactly_two_hours_is_not_long():
    c = classify(spec(gpus=8, estimate_s=2 * H))
    assert c.type == "ai-inference"
    assert "estimate 2h is not over 2h" in c.reason


def test_many_gpus_without_estimate_is_inference():
    c = classify(spec(gpus=8, walltime_s=10 * H))
    assert c.type == "ai-inference"
    assert "no estimate" in c.reason


def test_few_gpus_with_long_estimate_is_inference():
    c = classify(spec(gpus=1, estimate_s=10 * H))
    assert c.type == "ai-inference"
    assert "1 GPU" in c.reason and "fewer than the 2" in c.reason


def test_many_cpus_without_gpu_is_hpc():
    c = classify(spec(cpus=256))
    assert c.type == "hpc-simulation"
    assert c.reason == "no type given; no GPUs and 256 CPUs (≥ 64) → hpc-simulation"


def test_sixty_four_cpus_is_many():
    assert classify(spec(cpus=64, estimate_s=5 * MIN)).type == "hpc-simulation"
    assert "64 CPUs (≥ 64)" in classify(spec(cpus=64)).reason


def test_many_cpus_with_a_gpu_is_not_hpc():
    assert classify(spec(cpus=128, gpus=1)).type == "ai-inference"


def test_small_short_request_is_agent():
    c = classify(spec(cpus=2, estimate_s=5 * MIN))
    assert c.type == "agent"
    assert c.reason == (
        "no type given; small request (2 CPUs ≤ 4, no GPUs) and estimate 5min (under 30min) → agent"
    )


def test_thirty_minutes_exactly_is_not_agent_under_is_strict():
    assert classify(spec(cpus=4, estimate_s=30 * MIN)).type == "hpc-simulation"
    assert classify(spec(cpus=4, estimate_s=30 * MIN - 1)).type == "agent"


def test_walltime_stands_in_for_a_missing_estimate():
    c = classify(spec(cpus=1, walltime_s=20 * MIN))
    assert c.type == "agent"
    assert "walltime 20min" in c.reason


def test_estimate_is_preferred_to_walltime_for_duration():
    c = classify(spec(cpus=1, estimate_s=40 * MIN, walltime_s=20 * MIN))
    assert c.type == "hpc-simulation"
    assert "estimate 40min is not under an agent's 30min" in c.reason


def test_small_request_of_unknown_duration_is_not_agent():
    c = classify(spec(cpus=1))
    assert c.type == "hpc-simulation"
    assert "no estimate or walltime" in c.reason


def test_short_but_not_small_is_cpu_batch_work():
    c = classify(spec(cpus=5, estimate_s=5 * MIN))
    assert c.type == "hpc-simulation"
    assert "5 CPUs (< 64), more than an agent's 4" in c.reason


def test_short_gpu_task_is_inference_not_agent():
    assert classify(spec(cpus=1, gpus=1, estimate_s=5 * MIN)).type == "ai-inference"


def test_classifier_thresholds_are_a_policy():
    policy = ClassifierPolicy(small_gpus=1)
    assert classify(spec(cpus=1, gpus=1, estimate_s=5 * MIN), policy).type == "agent"
    policy = ClassifierPolicy(many_gpus=2, long_estimate_s=H)
    c = classify(spec(gpus=2, estimate_s=90 * MIN), policy)
    assert c.type == "ai-training"
    assert "2 GPUs (≥ 2) and estimate 1h30min (> 1h)" in c.reason


# ---------------------------------------------------------------- route


def test_rules_route_each_type_to_its_queue(rules, queues):
    expected = {
        "ai-training": "training",
        "ai-inference": "inference-agent",
        "agent": "inference-agent",
        "sandbox": "inference-agent",
        "hpc-simulation": "hpc",
    }
    for task_type, queue in expected.items():
        r = route(spec(), task_type, rules, queues)
        assert isinstance(r, Routed)
        assert r.queue == queue
    r = route(spec(), "ai-training", rules, queues)
    assert r.reason == "rule 10: type ai-training → queue training"


def test_explicit_queue_is_honoured(rules, queues):
    r = route(spec(queue="hpc"), "hpc-simulation", rules, queues)
    assert r == Routed("hpc", "queue hpc requested")


def test_unknown_explicit_queue_is_refused_listing_known_queues(rules, queues):
    r = route(spec(queue="gpu"), "agent", rules, queues)
    assert isinstance(r, Refused)
    assert r.field == "queue"
    assert "unknown queue gpu" in r.reason
    assert "hpc, inference-agent, training" in r.reason


def test_explicit_queue_that_does_not_take_the_type_is_refused(rules, queues):
    r = route(spec(queue="hpc"), "ai-training", rules, queues)
    assert r == Refused("queue hpc takes hpc-simulation tasks, not ai-training", field="queue")


def test_queue_without_task_types_takes_any_type(rules):
    queues = {"any": QueuePolicy(name="any", pool="p", task_types=())}
    assert route(spec(queue="any"), "agent", rules, queues) == Routed("any", "queue any requested")


def test_first_rule_by_order_wins_whatever_the_list_order(queues):
    rules = [
        RoutingRuleView(order=20, match_type="ai-inference", queue="inference-agent"),
        RoutingRuleView(order=5, min_gpus=8, queue="training"),
    ]
    r = route(spec(gpus=8), "ai-inference", rules, queues)
    assert r == Routed("training", "rule 5: ≥ 8 GPUs → queue training")
    r = route(spec(gpus=4), "ai-inference", rules, queues)
    assert r.queue == "inference-agent"


def test_rule_predicates_must_all_hold(queues):
    rules = [
        RoutingRuleView(order=1, match_type="hpc-simulation", min_cpus=512, queue="training"),
        RoutingRuleView(order=2, queue="hpc"),
    ]
    assert route(spec(cpus=256), "hpc-simulation", rules, queues).queue == "hpc"
    r = route(spec(cpus=512), "hpc-simulation", rules, queues)
    assert r.reason == "rule 1: type hpc-simulation, ≥ 512 CPUs → queue training"
    assert route(spec(cpus=256), "agent", rules, queues).reason == "rule 2: any task → queue hpc"


def test_rule_pointing_at_a_missing_queue_is_skipped(queues):
    rules = [
        RoutingRuleView(order=1, match_type="agent", queue="gone"),
        RoutingRuleView(order=2, match_type="agent", queue="inference-agent"),
    ]
    assert route(spec(), "agent", rules, queues).queue == "inference-agent"


def test_no_matching_rule_is_refused_with_the_shape(queues):
    rules = [RoutingRuleView(order=1, match_type="agent", queue="inference-agent")]
    r = route(spec(cpus=8, gpus=2), "ai-inference", rules, queues)
    assert r == Refused("no routing rule matches type ai-inference with 2 GPUs / 8 CPUs")
    r = route(spec(type="ai-inference"), "ai-inference", rules, queues)
    assert r.field == "type"


# ---------------------------------------------------------------- check


def test_default_site_admits_the_launch_mix_tasks(pools, queues):
    assert (
        check(spec(cpus=1, estimate_s=5 * MIN), queues["inference-agent"], pools["inference-agent"])
        is None
    )
    training = spec(cpus=256, gpus=32, nodes=4, memory_mib=512 * GIB, estimate_s=40 * H)
    assert check(training, queues["training"], pools["gpu-train"]) is None
    hpc = spec(cpus=256, memory_mib=256 * GIB, walltime_s=48 * H)
    assert check(hpc, queues["hpc"], pools["cpu-hpc"]) is None


def test_check_accepts_a_cached_pool_capacity(pools, queues):
    capacity = pool_capacity(pools["gpu-train"])
    assert capacity.node_count == 20
    assert len(capacity.shapes) == 1
    too_wide = spec(gpus=16, nodes=1, estimate_s=5 * H)
    assert check(too_wide, queues["training"], capacity) == check(
        too_wide, queues["training"], pools["gpu-train"]
    )


def test_walltime_over_queue_maximum_is_refused(pools, queues):
    r = check(spec(walltime_s=96 * H), queues["hpc"], pools["cpu-hpc"])
    assert r == Refused("walltime 96h exceeds queue hpc's maximum of 72h", field="walltime")


def test_walltime_at_queue_maximum_is_admitted(pools, queues):
    assert check(spec(walltime_s=72 * H), queues["hpc"], pools["cpu-hpc"]) is None


def test_training_without_estimate_is_refused(pools, queues):
    r = check(spec(gpus=8, nodes=1), queues["training"], pools["gpu-train"])
    assert r.field == "estimate"
    assert "queue training requires an estimate" in r.reason


def test_estimate_longer_than_walltime_is_refused(pools, queues):
    r = check(spec(estimate_s=50 * H, walltime_s=48 * H), queues["hpc"], pools["cpu-hpc"])
    assert r.field == "estimate"
    assert "estimate 50h is longer than walltime 48h" in r.reason


def test_estimate_longer_than_queue_limit_is_refused_when_walltime_absent(pools, queues):
    r = check(spec(estimate_s=2 * H), queues["inference-agent"], pools["inference-agent"])
    assert r.field == "estimate"
    assert "walltime limit of 1h" in r.reason


def test_too_many_gpus_on_one_node_is_refused_with_the_largest_node(pools, queues):
    r = check(spec(gpus=16, nodes=1, estimate_s=5 * H), queues["training"], pools["gpu-train"])
    assert r == Refused(
        "asks 16 GPUs on one node; the largest node of pool gpu-train has 8",
        field="resources.gpus",
    )


def test_gpus_on_each_node_are_the_total_divided_by_nodes(pools, queues):
    assert (
        check(
            spec(gpus=32, cpus=32, nodes=4, estimate_s=5 * H),
            queues["training"],
            pools["gpu-train"],
        )
        is None
    )
    r = check(spec(gpus=32, nodes=2, estimate_s=5 * H), queues["training"], pools["gpu-train"])
    assert r.field == "resources.gpus"
    assert "asks 16 GPUs on each of 2 nodes" in r.reason


def test_too_many_cpus_on_one_node_is_refused(pools, queues):
    r = check(spec(cpus=128, nodes=1), queues["hpc"], pools["cpu-hpc"])
    assert r == Refused(
        "asks 128 CPUs on one node; the largest node of pool cpu-hpc offers 64",
        field="resources.cpus",
    )


def test_oversubscription_multiplies_cpu_capacity(pools, queues):
    queue = queues["inference-agent"]
    assert check(spec(cpus=256, nodes=1, walltime_s=H), queue, pools["inference-agent"]) is None
    r = check(spec(cpus=257, nodes=1, walltime_s=H), queue, pools["inference-agent"])
    assert r.field == "resources.cpus"
    assert "offers 256 (64 cores shared 1:4)" in r.reason


def test_too_much_memory_per_node_is_refused(pools, queues):
    r = check(spec(memory_mib=2 * TIB, walltime_s=H), queues["hpc"], pools["cpu-hpc"])
    assert r == Refused(
        "asks 2 TiB of memory per node; the largest node of pool cpu-hpc has 512 GiB",
        field="resources.memory",
    )


def test_memory_is_checked_on_the_nodes_that_have_the_gpus(pools, queues):
    # The pool has 512 GiB nodes, but not with GPUs.
    queue = queues["inference-agent"]
    r = check(spec(gpus=4, nodes=1, memory_mib=512 * GIB), queue, pools["inference-agent"])
    assert r.field == "resources.memory"
    assert "the largest node with 4 GPUs of pool inference-agent has 256 GiB" in r.reason
    r = check(spec(gpus=1, memory_mib=512 * GIB), queue, pools["inference-agent"])
    assert r.field == "resources.memory"
    assert "the largest GPU node of pool inference-agent has 256 GiB" in r.reason


def test_more_nodes_than_the_pool_has_is_refused(pools, queues):
    r = check(
        spec(cpus=64 * 30, gpus=8 * 30, nodes=30, estimate_s=5 * H),
        queues["training"],
        pools["gpu-train"],
    )
    assert r.field == "resources.nodes"
    assert "asks 30 nodes" in r.reason and "pool gpu-train has 20 such nodes" in r.reason


def test_spread_task_must_fit_the_pool_in_all(pools, queues):
    queue = queues["hpc"]
    assert check(spec(cpus=320), queue, pools["cpu-hpc"]) is None
    r = check(spec(cpus=321), queue, pools["cpu-hpc"])
    assert r == Refused("asks 321 CPUs; pool cpu-hpc offers 320 in all", field="resources.cpus")


def test_spread_gpus_count_only_nodes_that_hold_the_memory(queues):
    nodes = [
        NodeView("big", cpus=64, memory_mib=TIB, gpus=8),
        NodeView("small", cpus=64, memory_mib=256 * GIB, gpus=8),
    ]
    queue = queues["training"]
    r = check(spec(gpus=16, memory_mib=TIB, estimate_s=5 * H), queue, nodes)
    assert r.field == "resources.gpus"
    assert "pool gpu-train has 8 in all on nodes with 1 TiB" in r.reason


def test_gpu_task_on_a_cpu_pool_is_refused(pools, queues):
    r = check(spec(gpus=1), queues["hpc"], pools["cpu-hpc"])
    assert r == Refused("asks 1 GPU; pool cpu-hpc has no GPU nodes", field="resources.gpus")


def test_spread_gpus_need_a_cpu_on_every_node(queues):
    queue = queues["inference-agent"]
    nodes = [NodeView(f"n{i}", cpus=32, memory_mib=256 * GIB, gpus=4) for i in range(3)]
    r = check(spec(gpus=8, cpus=1), queue, nodes)
    assert r.field == "resources.cpus"
    assert "at least 2 nodes" in r.reason
    assert check(spec(gpus=8, cpus=2), queue, nodes) is None


def test_unknown_gpu_model_is_refused(pools, queues):
    r = check(
        spec(gpus=8, nodes=1, gpu_type="H100", estimate_s=5 * H),
        queues["training"],
        pools["gpu-train"],
    )
    assert r == Refused("asks for H100 GPUs; pool gpu-train has A100", field="resources.gpu_type")


def test_gpu_model_restricts_the_nodes_counted(queues):
    nodes = [
        NodeView("a", cpus=64, memory_mib=TIB, gpus=8, gpu_model="A100"),
        NodeView("h", cpus=64, memory_mib=TIB, gpus=8, gpu_model="H100"),
    ]
    queue = queues["training"]
    assert check(spec(gpus=8, nodes=1, gpu_type="H100", estimate_s=5 * H), queue, nodes) is None
    r = check(spec(gpus=16, gpu_type="H100", estimate_s=5 * H), queue, nodes)
    assert r.field == "resources.gpus"


def test_drained_nodes_still_count_for_admission(queues):
    nodes = [NodeView("n", cpus=64, memory_mib=512 * GIB, available=False)]
    assert check(spec(cpus=64), queues["hpc"], nodes) is None


def test_empty_pool_refuses(queues):
    r = check(spec(), queues["hpc"], [])
    assert r == Refused("queue hpc's pool cpu-hpc has no nodes")


def test_check_ignores_what_is_free_now(queues):
    busy = NodeView("n", cpus=64, memory_mib=512 * GIB, free_cpus=0, free_memory_mib=0)
    assert check(spec(cpus=64), queues["hpc"], [busy]) is None


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
