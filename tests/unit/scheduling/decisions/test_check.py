"""The pure policy functions: check, what is admitted (docs/architecture.md)."""

from __future__ import annotations

from scheduling.decisions import (
    NodeView,
    Refused,
    check,
    pool_capacity,
)
from tests.unit.scheduling.decisions.helpers import (
    GIB,
    MIN,
    TIB,
    H,
    spec,
)

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
