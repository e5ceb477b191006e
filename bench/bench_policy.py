"""How long the policy pass takes to re-level 10,000 waiting tasks (target ≤ 1 s).

Run: `.venv/bin/python bench/bench_policy.py`. Prints one JSON line; `run()` returns the same
dict for `bench/run_all.py`.

A portal of its own (fresh var dir, migrated, seeded) gets 10,000 waiting tasks of the launch
mix (agent, training, HPC) that became ready 45 s ago, at the level and with the reason a submission
gives them, held by their quota so nothing dispatches them. Then `scheduling.engine.levels.relevel(now)` runs twice: the first pass
changes every agent task (high → medium after 30 s) and writes their events; the second finds
nothing to change (the steady state, every few seconds in production). With DATABASE_URL set
it runs again on PostgreSQL (a fresh database, dropped afterwards).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

N_TASKS = 10_000
TARGET_S = 1.0
COMMAND = ".venv/bin/python bench/bench_policy.py"


def _child(n: int) -> dict[str, Any]:
    import django

    django.setup()
    from datetime import timedelta

    from django.contrib.auth.models import User
    from django.utils import timezone

    from portal.models import Project
    from scheduling.engine.levels import relevel
    from scheduling.models import Queue, Task

    alice = User.objects.get(username=c.DEMO_USER)
    project = Project.objects.get(slug="materials")
    queues = {q.name: q for q in Queue.objects.all()}
    now = timezone.now()
    ready = now - timedelta(seconds=45)
    entered = {
        2: "agent tasks enter high",
        1: "ai-training tasks enter medium",
        0: "hpc-simulation tasks enter low",
    }
    mix = [
        ("agent", "inference-agent", 2),
        ("ai-training", "training", 1),
        ("hpc-simulation", "hpc", 0),
    ]
    Task.objects.bulk_create(
        [
            Task(
                project=project,
                owner=alice,
                name=f"wait-{i}",
                descriptor="{}",
                descriptor_format="json",
                spec={"name": f"wait-{i}", "project": "materials", "resources": {"cpus": 1}},
                type=mix[i % 3][0],
                classify_reason="bench",
                queue=queues[mix[i % 3][1]],
                routing_reason="bench",
                backend="local",
                state="waiting",
                hold="quota",
                reason="held by the bench",
                level=mix[i % 3][2],
                level_reason=entered[mix[i % 3][2]],  # as a submission stores it
                ready_at=ready,
            )
            for i in range(n)
        ],
        batch_size=1000,
    )
    started = time.perf_counter()
    changed_first = relevel(now)
    first = time.perf_counter() - started
    started = time.perf_counter()
    changed_steady = relevel(now)
    steady = time.perf_counter() - started
    return {
        "tasks": n,
        "first_pass_s": round(first, 3),
        "first_pass_level_changes": changed_first,
        "steady_pass_s": round(steady, 3),
        "steady_pass_level_changes": changed_steady,
    }


def _measure(env: dict[str, str]) -> dict[str, Any]:
    c.prepare_site(env)
    argv = [c.PY, __file__, "--child", str(N_TASKS)]
    return c.run_child(argv, env, timeout=600, what="policy bench")


def run() -> dict[str, Any]:
    return {"bench": "policy", "target_s": TARGET_S, **c.per_database("policy", _measure)}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(int(sys.argv[2]))))
    else:
        print(json.dumps(run()))
