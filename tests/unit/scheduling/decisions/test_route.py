"""The pure policy functions: route (docs/architecture.md)."""

from __future__ import annotations

from scheduling.decisions import (
    QueuePolicy,
    Refused,
    Routed,
    RoutingRuleView,
    route,
)
from tests.unit.scheduling.decisions.helpers import (
    spec,
)

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
