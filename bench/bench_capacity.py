"""How long "whom to preempt" takes when the inference pool is full (no target: it runs for
each waiting task on every capacity pass, so it must stay far below the pass period).

Run: `.venv/bin/python bench/bench_capacity.py` (no Django needed). Prints one JSON line;
`run()` returns the same dict for `bench/run_all.py`.

The default site's inference-agent pool (10 GPU nodes of 4 GPUs, 5 CPU nodes of 64 cores),
full: one medium-level inference task per GPU and one agent per agent-node core (360
running); a high-level task asking one GPU looks for its victim among them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scheduling.decisions.levels import HIGH, MEDIUM  # noqa: E402
from scheduling.decisions.preempt import Running, whom_to_preempt  # noqa: E402
from scheduling.decisions.types import NodeAllocation  # noqa: E402
from scheduling.sites import default_site  # noqa: E402
from scheduling.spec import Resources, TaskSpec  # noqa: E402

COMMAND = ".venv/bin/python bench/bench_capacity.py"


def full_pool():
    site = default_site()
    nodes = site.nodes_by_pool()["inference-agent"]
    running = []
    for n in nodes:
        for slot in range(n.gpus or n.cpus):
            gpus = (slot,) if n.gpus else ()
            alloc = NodeAllocation(n.name, 8 if n.gpus else 1, 1024, gpus)
            kind = "ai-inference" if n.gpus else "agent"
            running.append(Running(str(len(running)), kind, MEDIUM, True, (alloc,), len(running)))
    return site.queues_by_name()["inference-agent"], nodes, running


def run(n: int = 500) -> dict:
    queue, nodes, running = full_pool()
    spec = TaskSpec(
        name="urgent",
        project="p",
        walltime_s=600,
        resources=Resources(cpus=1, gpus=1, memory_mib=1024),
    )
    decision = whom_to_preempt(spec, queue, HIGH, nodes, running, now=0.0)
    assert decision is not None and len(decision.victims) == 1
    start = time.perf_counter()
    for _ in range(n):
        whom_to_preempt(spec, queue, HIGH, nodes, running, now=0.0)
    seconds = time.perf_counter() - start
    return {
        "bench": "preempt",
        "ms_per_decision": round(seconds / n * 1000, 3),
        "nodes": len(nodes),
        "running": len(running),
        "n": n,
    }


if __name__ == "__main__":
    print(json.dumps(run()))
