"""How many decisions per second one core makes on the default site: classify → route →
check → admit (quotas) → level, as the engine makes them for a new task.

Run: `python bench/bench_decisions.py` (no Django needed). Prints one JSON line. `run()` returns
the same dict for `bench/run_all.py`.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.decisions import (  # noqa: E402
    PoolCapacity,
    QueuePolicy,
    Routed,
    RoutingRuleView,
    check,
    classify,
    pool_capacity,
    route,
)
from scheduling.decisions.levels import Waiting, level, rule_for  # noqa: E402
from scheduling.decisions.quota import Ask, QuotaRule, Usage, admit  # noqa: E402
from scheduling.sites import default_site  # noqa: E402
from scheduling.spec import Resources, TaskSpec  # noqa: E402

H = 3600
GIB = 1024
TIB = 1024 * GIB


def spec_mix() -> list[TaskSpec]:
    """A mix like the launch mix, plus declared types, explicit queues and refusals."""

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


T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
NOW = T0 + timedelta(seconds=45)
# The default site's project quota, and one on the agent queue, with some use already.
QUOTAS = (
    QuotaRule("bench", "training", "gpus", 32, id=1),
    QuotaRule("bench", "inference-agent", "tasks", 500, id=2),
)
USAGE = {("bench", "training", None): Usage(gpus=16, cpus=128, tasks=2)}


def decide(
    spec: TaskSpec,
    rules: list[RoutingRuleView],
    queues: dict[str, QueuePolicy],
    capacity: dict[str, PoolCapacity],
    level_rules: tuple = (),
) -> object:
    """One decision, as the engine makes it: classify, route, check, admit, level."""
    kind = classify(spec)
    routed = route(spec, kind.type, rules, queues)
    if not isinstance(routed, Routed):
        return routed
    queue = queues[routed.queue]
    refused = check(spec, queue, capacity[queue.pool])
    if refused is not None:
        return refused
    ask = Ask("bench", routed.queue, "u", spec.resources.gpus, spec.resources.cpus)
    admission = admit(ask, QUOTAS, USAGE)
    rule = rule_for(level_rules, kind.type, routed.queue)
    return routed, admission, level(Waiting(kind.type, routed.queue, ready_at=T0), rule, NOW)


def run(n: int = 200_000, repeats: int = 3) -> dict:
    site = default_site()  # scheduling/sites/default.py: what seed_demo writes
    queues = site.queues_by_name()
    rules = list(site.rules)
    capacity = {pool.name: pool_capacity(pool.nodes) for pool in site.pools}
    mix = spec_mix()
    specs = (mix * (n // len(mix) + 1))[:n]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for spec in specs:
            decide(spec, rules, queues, capacity, site.level_rules)
        best = min(best, time.perf_counter() - start)
    return {
        "bench": "decisions",
        "decisions_per_s": round(n / best),
        "n": n,
        "seconds": round(best, 4),
    }


if __name__ == "__main__":
    print(json.dumps(run()))
