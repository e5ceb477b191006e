"""What a simulated run measured: waits, bounded slowdown, makespan, utilisation, preemptions,
the flow time of a project's HPC + training pair, the bound (total work / capacity), and how
far predicted runtimes were off."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from scheduling.decisions.predict import prediction_error
from scheduling.decisions.types import NodeView
from simulation.simulator.model import Run, SimJob

# Bounded slowdown's floor on runtime: a 1 s job that waited 10 s is not "slowed down 11x".
BSLD_FLOOR_S = 10.0


def percentile(values: Sequence[float], p: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    k = (len(data) - 1) * p / 100
    lo, hi = int(k), min(len(data) - 1, int(k) + 1)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def bounded_slowdown(wait: float, runtime: float) -> float:
    return max(1.0, (wait + runtime) / max(runtime, BSLD_FLOOR_S))


def _bsld(o) -> float:
    # From submit to the end of the run that completed, over that run's length: a job
    # preempted or lost counts the lost run as delay.
    return bounded_slowdown(o.end - o.submit - (o.end - o.start), o.end - o.start)


def summary(
    run: Run,
    pools: Mapping[str, Sequence[NodeView]],
    *,
    window: tuple[float, float] | None = None,
) -> dict:
    """Per type: count, mean and p95 wait (s), mean bounded slowdown, preemptions; overall:
    makespan, mean bounded slowdown, and each pool's and the site's CPU and GPU utilisation
    over `window` (default: from the first submit to the last end)."""
    outcomes = list(run.outcomes.values())
    start = min((o.submit for o in outcomes), default=0.0)
    end = max((o.end for o in outcomes), default=0.0)
    lo, hi = window or (start, end)
    by_type: dict[str, list] = defaultdict(list)
    for o in outcomes:
        by_type[o.type].append(o)
    stopped = Counter((s.type, s.ended) for s in run.spans if s.ended != "done")
    types = {}
    for kind, done in sorted(by_type.items()):
        waits = [o.wait for o in done]
        types[kind] = {
            "n": len(done),
            "mean_wait_s": statistics.fmean(waits),
            "p95_wait_s": percentile(waits, 95),
            "max_wait_s": max(waits),
            "mean_bsld": statistics.fmean(_bsld(o) for o in done),
            "preempted": stopped[(kind, "preempted")],
            "reclaimed": stopped[(kind, "reclaimed")],
            "lost": stopped[(kind, "lost")],
        }
    every = [_bsld(o) for o in outcomes]
    return {
        "jobs": len(outcomes),
        "types": types,
        "makespan_s": end - start,
        "mean_bsld": statistics.fmean(every) if every else None,  # None: nothing ran
        "utilisation": utilisation(run, pools, lo, hi),
        "window_s": [lo, hi],
        "never": len(run.never),
        "never_by_type": dict(Counter(run.never_types.values())),
        "passes": run.passes,
    }


def utilisation(
    run: Run, pools: Mapping[str, Sequence[NodeView]], lo: float, hi: float
) -> dict[str, dict[str, float | None]]:
    """Busy share of each pool's CPUs and GPUs (and the whole site's, as "site") between `lo`
    and `hi`, counting every attempt (work later preempted or lost kept the room busy too)."""
    node_pool = {n.name: pool for pool, nodes in pools.items() for n in nodes}
    cores = {n.name: n.cpus for nodes in pools.values() for n in nodes}
    used: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    changes: dict[str, list[tuple[float, int]]] = defaultdict(list)  # node → (time, ±cpus)
    for span in run.spans:
        start, end = max(span.start, lo), min(span.end, hi)
        if end <= start:
            continue
        for a in span.allocations:
            pool = node_pool.get(a.node)
            if pool is not None:
                changes[a.node] += [(start, a.cpus), (end, -a.cpus)]
                for key in (pool, "site"):
                    used[key][1] += len(a.gpu_indices) * (end - start)
    # CPUs: at most the node's cores at any moment (oversubscribed work keeps a core busy once:
    # utilisation is of the hardware).
    for node, steps in changes.items():
        busy, held, at = 0.0, 0, lo
        for t, delta in sorted(steps):
            busy += min(held, cores[node]) * (t - at)
            held, at = held + delta, t
        for key in (node_pool[node], "site"):
            used[key][0] += busy
    result = {}
    every = [n for nodes in pools.values() for n in nodes]
    length = hi - lo
    for pool, nodes in [*pools.items(), ("site", every)]:
        cpus, gpus = sum(n.cpus for n in nodes), sum(n.gpus for n in nodes)
        result[pool] = {
            "cpu": used[pool][0] / (cpus * length) if cpus and length > 0 else 0.0,
            "gpu": used[pool][1] / (gpus * length) if gpus and length > 0 else None,
        }
    return result


def flow_time(run: Run, keys: Sequence[str]) -> float | None:
    """From the first submit to the last end of `keys` (None if one never ran)."""
    done = [o for k in keys if (o := run.outcomes.get(k)) is not None]
    if not done or len(done) < len(keys):
        return None
    return max(o.end for o in done) - min(o.submit for o in done)


def bound(jobs: Sequence[SimJob], pools: Mapping[str, Sequence[NodeView]]) -> dict[str, float]:
    """Total work over capacity, in seconds: no schedule finishes the work sooner."""
    every = [n for nodes in pools.values() for n in nodes]
    cpus, gpus = sum(n.cpus for n in every), sum(n.gpus for n in every)
    cpu_work = sum(j.spec.resources.cpus * j.runtime for j in jobs)
    gpu_work = sum(j.spec.resources.gpus * j.runtime for j in jobs)
    return {
        "cpu_s": cpu_work / cpus if cpus else 0.0,
        "gpu_s": gpu_work / gpus if gpus else 0.0,
    }


def with_prediction(result: dict, pairs: Iterable[tuple[float, float]]) -> dict:
    """`result` (a `summary`) with the error of the run's predicted runtimes under
    "prediction": from (predicted, actual) seconds, one pair per job planned with a
    prediction — count, mean absolute error (s), mean absolute relative error, the share that
    ran longer than predicted, the mean ratio (all None when no job had one)."""
    result["prediction"] = prediction_error(pairs).as_dict()
    return result
