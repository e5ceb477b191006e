"""What a simulated run measured: waits, bounded slowdown, makespan, utilisation."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from scheduling.decisions.types import NodeView
from scheduling.simulation.engine import Run

# Bounded slowdown's floor on runtime: a 1 s job that waited 10 s is not "slowed down 11x".
BSLD_FLOOR_S = 10.0


def percentile(values: Sequence[float], p: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    k = (len(data) - 1) * p / 100
    lo, hi = int(k), min(len(data) - 1, int(k) + 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def summary(run: Run, pools: Mapping[str, Sequence[NodeView]]) -> dict:
    """Per type: count, mean and p95 wait (s), mean bounded slowdown; overall makespan and
    each pool's CPU and GPU utilisation over it."""
    by_type: dict[str, list] = defaultdict(list)
    for o in run.outcomes.values():
        by_type[o.type].append(o)
    types = {}
    for kind, outcomes in sorted(by_type.items()):
        waits = [o.wait for o in outcomes]
        bsld = [max(1.0, (o.end - o.submit) / max(o.end - o.start, BSLD_FLOOR_S)) for o in outcomes]
        types[kind] = {
            "n": len(outcomes),
            "mean_wait_s": statistics.fmean(waits),
            "p95_wait_s": percentile(waits, 95),
            "mean_bsld": statistics.fmean(bsld),
        }
    start = min((o.submit for o in run.outcomes.values()), default=0.0)
    end = max((o.end for o in run.outcomes.values()), default=0.0)
    makespan = end - start
    node_pool = {n.name: pool for pool, nodes in pools.items() for n in nodes}
    used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for o in run.outcomes.values():
        for a in o.allocations:
            pool = node_pool.get(a.node)
            if pool is not None:
                used[pool][0] += a.cpus * (o.end - o.start)
                used[pool][1] += len(a.gpu_indices) * (o.end - o.start)
    utilisation = {}
    for pool, nodes in pools.items():
        cpus, gpus = sum(n.cpus for n in nodes), sum(n.gpus for n in nodes)
        utilisation[pool] = {
            "cpu": used[pool][0] / (cpus * makespan) if cpus and makespan else 0.0,
            "gpu": used[pool][1] / (gpus * makespan) if gpus and makespan else None,
        }
    return {"types": types, "makespan_s": makespan, "utilisation": utilisation,
            "never": dict(run.never)}  # fmt: skip
