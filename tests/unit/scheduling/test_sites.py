"""The default site as plain data (scheduling/sites/), and seed_demo writing exactly it."""

from __future__ import annotations

import dataclasses
import io
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command
from knox.models import AuthToken

from scheduling.decisions import QueuePolicy, Routed, RoutingRuleView, route
from scheduling.decisions.storage import AreaView
from scheduling.decisions.types import NodeView
from scheduling.models import Node, Pool, Queue, RoutingRule
from scheduling.sites import POOL_KINDS, PoolSpec, Site, default_site
from scheduling.spec import TASK_TYPES, Resources, TaskSpec

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024
H = 3600


def shapes(nodes) -> Counter:
    return Counter((n.cpus, n.memory_mib, n.gpus, n.gpu_model) for n in nodes)


# ---------------------------------------------------------------- the site as data


def test_default_site_is_forty_nodes_in_the_seeds_three_pools():
    site = default_site()
    assert [(p.name, p.kind) for p in site.pools] == [
        ("gpu-train", "gpu-training"),
        ("inference-agent", "inference"),
        ("cpu-hpc", "cpu-hpc"),
    ]
    assert len(site.nodes) == 40
    pools = site.nodes_by_pool()
    assert shapes(pools["gpu-train"]) == {(64, 1024 * GIB, 8, "A100"): 20}
    assert shapes(pools["inference-agent"]) == {
        (32, 256 * GIB, 4, "L40S"): 10,
        (64, 512 * GIB, 0, None): 5,
    }
    assert shapes(pools["cpu-hpc"]) == {(64, 512 * GIB, 0, None): 5}

    assert [n.name for n in pools["gpu-train"]] == [f"gpu{i:03d}" for i in range(1, 21)]
    assert [n.name for n in pools["inference-agent"]] == [f"inf{i:03d}" for i in range(1, 11)] + [
        f"agt{i:03d}" for i in range(1, 6)
    ]
    assert [n.name for n in pools["cpu-hpc"]] == [f"cpu{i:03d}" for i in range(1, 6)]
    # Ten nodes to a switch, numbered within each name prefix.
    switches = {n.name: n.switch for n in site.nodes}
    assert switches["gpu010"] == "gpu-train-sw1"
    assert switches["gpu011"] == "gpu-train-sw2"
    assert switches["gpu020"] == "gpu-train-sw2"
    assert {switches[f"inf{i:03d}"] for i in range(1, 11)} == {"inference-agent-sw1"}
    assert {switches[f"agt{i:03d}"] for i in range(1, 6)} == {"inference-agent-sw1"}
    assert {switches[f"cpu{i:03d}"] for i in range(1, 6)} == {"cpu-hpc-sw1"}
    # Nodes start idle and up.
    assert all(n.idle and n.available for n in site.nodes)


def test_default_site_queues_and_rules_are_the_seeds():
    site = default_site()
    queues = site.queues_by_name()
    assert queues["training"] == QueuePolicy(
        name="training",
        pool="gpu-train",
        task_types=("ai-training",),
        requires_estimate=True,
        allocation="whole-node",
        policy="priority-quota",
        wait_bound_s=6 * H,  # past it, nothing passes a training (docs/policy.md)
    )
    assert queues["inference-agent"] == QueuePolicy(
        name="inference-agent",
        pool="inference-agent",
        task_types=("ai-inference", "agent", "sandbox"),
        max_walltime_s=H,
        default_walltime_s=H,
        preemptible=True,
        allocation="pack",
        cpu_oversubscription=4,
        max_concurrency=500,
        policy="elastic",
        idle_scale_in_s=120,  # a live sandbox's idle timeout (docs/sandboxes.md)
    )
    assert queues["hpc"] == QueuePolicy(
        name="hpc",
        pool="cpu-hpc",
        task_types=("hpc-simulation",),
        max_walltime_s=72 * H,
        default_walltime_s=72 * H,
        allocation="pack",
        policy="fairshare",
        wait_bound_s=24 * H,
    )
    assert [(r.order, r.match_type, r.queue) for r in site.rules] == [
        (10, "ai-training", "training"),
        (20, "hpc-simulation", "hpc"),
        (30, "ai-inference", "inference-agent"),
        (40, "agent", "inference-agent"),
        (50, "sandbox", "inference-agent"),
    ]


def test_every_queue_names_a_pool_and_every_rule_a_queue_that_takes_its_type():
    site = default_site()
    pools = {p.name for p in site.pools}
    queues = site.queues_by_name()
    assert len(queues) == len(site.queues) == 3
    for queue in site.queues:
        assert queue.pool in pools, queue
    for rule in site.rules:
        assert rule.queue in queues, rule
        assert rule.match_type in queues[rule.queue].task_types, rule
    assert len({r.order for r in site.rules}) == len(site.rules)
    # Every task type has a route, to a queue that takes it.
    spec = TaskSpec(name="t", project="p", resources=Resources())
    for task_type in TASK_TYPES:
        routed = route(spec, task_type, list(site.rules), queues)
        assert isinstance(routed, Routed), task_type
        assert task_type in queues[routed.queue].task_types


def test_pool_kinds_are_the_models_kinds():
    assert sorted(POOL_KINDS) == sorted(Pool.Kind.values)


def test_a_site_whose_names_do_not_hold_together_is_refused():
    node = NodeView("n1", cpus=4, memory_mib=GIB)
    pool = PoolSpec(name="p", kind="cpu-hpc", nodes=(node,))
    queue = QueuePolicy(name="q", pool="p", task_types=())
    rule = RoutingRuleView(order=1, queue="q")
    assert Site(pools=(pool,), queues=(queue,), rules=(rule,)).nodes == (node,)

    with pytest.raises(ValueError, match="queue q names pool gone"):
        Site(pools=(pool,), queues=(dataclasses.replace(queue, pool="gone"),), rules=())
    with pytest.raises(ValueError, match="rule 1 names queue gone"):
        Site(pools=(pool,), queues=(queue,), rules=(RoutingRuleView(order=1, queue="gone"),))
    with pytest.raises(ValueError, match="two nodes are named n1"):
        Site(pools=(pool, dataclasses.replace(pool, name="p2")), queues=(), rules=())
    with pytest.raises(ValueError, match="two pools are named p"):
        Site(pools=(pool, dataclasses.replace(pool, nodes=())), queues=(), rules=())
    with pytest.raises(ValueError, match="kind 'gpu'"):
        Site(pools=(dataclasses.replace(pool, kind="gpu"),), queues=(), rules=())
    beside = (
        AreaView("scratch", "/scratch/{project}", "project"),
        AreaView("people", "/scratch/{user}", "user"),
    )
    with pytest.raises(ValueError, match="storage area scratch: .* area people"):
        Site(pools=(pool,), queues=(), rules=(), storage_areas=beside)


def test_importing_the_sites_loads_no_django():
    code = (
        "import sys\n"
        "import scheduling.sites, scheduling.sites.default\n"
        "scheduling.sites.default_site()\n"
        "print(sorted(m for m in sys.modules if m.startswith('django')"
        " or m == 'scheduling.models'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------- seed_demo writes the site


def assert_database_is_the_site(backend: str) -> None:
    site = default_site()

    pools = {p.name: p for p in Pool.objects.all()}
    assert set(pools) == {p.name for p in site.pools}
    for spec in site.pools:
        assert (pools[spec.name].kind, pools[spec.name].backend) == (spec.kind, backend)

    rows = {n.name: n for n in Node.objects.select_related("pool")}
    assert set(rows) == {n.name for n in site.nodes}
    for spec in site.pools:
        for node in spec.nodes:
            row = rows[node.name]
            assert row.pool.name == spec.name, node.name
            assert row.cpus == node.cpus, node.name
            assert row.memory_mib == node.memory_mib, node.name
            assert row.gpus == node.gpus, node.name
            assert row.gpu_model == (node.gpu_model or ""), node.name
            assert row.switch == (node.switch or ""), node.name
            assert row.state == Node.State.UP, node.name

    queues = {q.name: q for q in Queue.objects.select_related("pool")}
    assert set(queues) == {q.name for q in site.queues}
    for policy in site.queues:
        row = queues[policy.name]
        for f in dataclasses.fields(QueuePolicy):
            want = getattr(policy, f.name)
            if f.name == "pool":
                got = row.pool.name
            elif f.name == "task_types":
                got = tuple(row.task_types)
            else:
                got = getattr(row, f.name)
            assert got == want, (policy.name, f.name)

    rules = list(RoutingRule.objects.select_related("queue").order_by("order"))
    assert [
        (r.order, r.match_type or None, r.min_gpus, r.min_cpus, r.queue.name, r.enabled)
        for r in rules
    ] == [(r.order, r.match_type, r.min_gpus, r.min_cpus, r.queue, True) for r in site.rules]


def test_seed_demo_writes_exactly_the_default_site(db):
    call_command("seed_demo", backend="fake", quiet=True)
    assert_database_is_the_site("fake")


def test_seed_demo_run_again_changes_nothing(db):
    call_command("seed_demo", backend="fake", quiet=True)
    node_ids = dict(Node.objects.values_list("name", "pk"))
    queue_ids = dict(Queue.objects.values_list("name", "pk"))
    call_command("seed_demo", backend="fake", quiet=True)
    assert_database_is_the_site("fake")
    assert dict(Node.objects.values_list("name", "pk")) == node_ids
    assert dict(Queue.objects.values_list("name", "pk")) == queue_ids


def test_seed_demo_if_new_keeps_a_site_written_before_with_its_changes(db):
    """What a second `make run` does: the queue an admin changed stays changed, the tokens
    given before keep working, and each demo account gets a new one, printed."""
    call_command("seed_demo", backend="fake", quiet=True)
    Queue.objects.filter(name="hpc").update(max_walltime_s=86400)
    before = AuthToken.objects.count()
    out = io.StringIO()
    call_command("seed_demo", backend="fake", if_new=True, stdout=out)
    assert Queue.objects.get(name="hpc").max_walltime_s == 86400
    assert AuthToken.objects.count() == before + 5
    assert "changes kept" in out.getvalue()
    assert "alice  alice-demo-pass  lead of materials and climate" in out.getvalue()
    # a demo pool removed since, and another backend asked: kept, and said
    Pool.objects.filter(name="cpu-hpc").update(name="cpu-old")
    out = io.StringIO()
    call_command("seed_demo", backend="local", if_new=True, stdout=out)
    assert Pool.objects.filter(name="cpu-old").exists()
    assert Queue.objects.get(name="hpc").max_walltime_s == 86400
    assert "Its pools run on fake, not local" in out.getvalue()
    # written afresh when asked
    Pool.objects.filter(name="cpu-old").update(name="cpu-hpc")
    call_command("seed_demo", backend="local", quiet=True)
    assert_database_is_the_site("local")
