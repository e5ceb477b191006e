"""How many classify → route → check decisions per second one core makes on the default site.

Run: `python bench/bench_decisions.py` (no Django needed). Prints one JSON line. `run()` returns
the same dict for `bench/run_all.py`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.decisions import (  # noqa: E402
    NodeView,
    PoolCapacity,
    QueuePolicy,
    Routed,
    RoutingRuleView,
    check,
    classify,
    pool_capacity,
    route,
)
from scheduling.spec import Resources, TaskSpec  # noqa: E402

H = 3600
GIB = 1024
TIB = 1024 * GIB


def default_site() -> tuple[
    dict[str, list[NodeView]], dict[str, QueuePolicy], list[RoutingRuleView]
]:
    """DESIGN.md's 40-node cluster: nodes by pool, queues by name, routing rules."""
    pools = {
        "gpu-train": [
            NodeView(f"gt{i:02d}", cpus=64, memory_mib=TIB, gpus=8, gpu_model="h100")
            for i in range(20)
        ],
        "inference-agent": [
            NodeView(f"ia{i:02d}", cpus=32, memory_mib=256 * GIB, gpus=4, gpu_model="l40s")
            for i in range(10)
        ]
        + [NodeView(f"ic{i:02d}", cpus=64, memory_mib=512 * GIB) for i in range(5)],
        "cpu-hpc": [NodeView(f"hp{i:02d}", cpus=64, memory_mib=512 * GIB) for i in range(5)],
    }
    queues = {
        "training": QueuePolicy(
            name="training",
            pool="gpu-train",
            task_types=("ai-training",),
            requires_estimate=True,
            allocation="whole-node",
            policy="priority-quota",
        ),
        "inference-agent": QueuePolicy(
            name="inference-agent",
            pool="inference-agent",
            task_types=("ai-inference", "agent", "sandbox"),
            max_walltime_s=1 * H,
            preemptible=True,
            allocation="pack",
            cpu_oversubscription=4,
            max_concurrency=500,
            policy="elastic",
        ),
        "hpc": QueuePolicy(
            name="hpc",
            pool="cpu-hpc",
            task_types=("hpc-simulation",),
            max_walltime_s=72 * H,
            policy="fairshare",
        ),
    }
    rules = [
        RoutingRuleView(order=10, match_type="ai-training", queue="training"),
        RoutingRuleView(order=20, match_type="ai-inference", queue="inference-agent"),
        RoutingRuleView(order=30, match_type="agent", queue="inference-agent"),
        RoutingRuleView(order=40, match_type="sandbox", queue="inference-agent"),
        RoutingRuleView(order=50, match_type="hpc-simulation", queue="hpc"),
    ]
    return pools, queues, rules


def spec_mix() -> list[TaskSpec]:
    """A mix like the R14 scenario, plus declared types, explicit queues and refusals."""

    def t(name: str, **kw: object) -> TaskSpec:
        res = kw.pop("resources", Resources())
        return TaskSpec(name=name, project="bench", resources=res, **kw)  # type: ignore[arg-type]

    return [
        t("agent", resources=Resources(cpus=1, memory_mib=2 * GIB), estimate_s=300),
        t("agent-wall", resources=Resources(cpus=2, memory_mib=GIB), walltime_s=20 * 60),
        t("sandbox", type="sandbox", resources=Resources(cpus=1), walltime_s=600),
        t(
            "train",
            resources=Resources(cpus=256, memory_mib=512 * GIB, gpus=32, nodes=4),
            estimate_s=40 * H,
        ),
        t(
            "train-declared",
            type="ai-training",
            resources=Resources(cpus=64, memory_mib=TIB, gpus=8, nodes=1),
            estimate_s=10 * H,
        ),
        t("infer", resources=Resources(cpus=8, memory_mib=64 * GIB, gpus=1), walltime_s=H),
        t("infer-big", resources=Resources(cpus=16, memory_mib=128 * GIB, gpus=4)),
        t("hpc", resources=Resources(cpus=256, memory_mib=512 * GIB, nodes=4), walltime_s=48 * H),
        t("hpc-spread", resources=Resources(cpus=128, memory_mib=64 * GIB), walltime_s=12 * H),
        t("cpu-batch", resources=Resources(cpus=8), walltime_s=4 * H),
        t("to-hpc", queue="hpc", resources=Resources(cpus=32), walltime_s=96 * H),  # refused
        t("train-no-est", type="ai-training", resources=Resources(gpus=8, nodes=1)),  # refused
        t("too-wide", resources=Resources(cpus=64, gpus=16, nodes=1), estimate_s=5 * H),  # refused
        t("bad-queue", queue="gpu", resources=Resources(cpus=1)),  # refused
    ]


def decide(
    spec: TaskSpec,
    rules: list[RoutingRuleView],
    queues: dict[str, QueuePolicy],
    capacity: dict[str, PoolCapacity],
) -> object:
    """One decision, as the engine makes it before quotas: classify, route, check."""
    kind = classify(spec)
    routed = route(spec, kind.type, rules, queues)
    if not isinstance(routed, Routed):
        return routed
    queue = queues[routed.queue]
    return check(spec, queue, capacity[queue.pool]) or routed


def run(n: int = 200_000, repeats: int = 3) -> dict:
    pools, queues, rules = default_site()
    capacity = {name: pool_capacity(nodes) for name, nodes in pools.items()}
    mix = spec_mix()
    specs = (mix * (n // len(mix) + 1))[:n]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for spec in specs:
            decide(spec, rules, queues, capacity)
        best = min(best, time.perf_counter() - start)
    return {
        "bench": "decisions",
        "decisions_per_s": round(n / best),
        "n": n,
        "seconds": round(best, 4),
    }


if __name__ == "__main__":
    print(json.dumps(run()))
