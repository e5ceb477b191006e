"""One poll cycle over 10,000 active jobs on the local backend (target ≤ 1 s per cycle).

Run: `.venv/bin/python bench/bench_poll.py` (SQLite), with `DATABASE_URL=postgres://…`
PostgreSQL as well. Prints one JSON line; `run()` returns the same dict for run_all.py.

A portal of its own (fresh var dir, migrated, seeded) has every node of the inference-agent
pool drained in its local backend, so nothing starts. 10,000 agent tasks are stored pending
and dispatched through the engine's own path (`claim_many` + `dispatch_claimed_many`, 500 at a
time): each becomes a real local-backend job, queued behind the drained nodes (a job folder,
its request and state files). Then `engine.backend_poll("local")`, what beat runs every
cycle, is timed: three steady cycles (10,000 jobs, nothing changed: the usual case), then a
cycle after 100 of the jobs were cancelled in the backend behind the portal's back (100
tasks end, with their events, attempts and end-of-task hooks). The dispatch rate of the
10,000 is reported beside it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

N_JOBS = 10_000
N_CHANGED = 100
TARGET_S = 1.0
CHUNK = 500
COMMAND = ".venv/bin/python bench/bench_poll.py (and with DATABASE_URL=postgres://…)"


def _child(n: int) -> dict[str, Any]:
    import django

    django.setup()
    from django.contrib.auth.models import User

    from portal.models import Project
    from scheduling import engine
    from scheduling.models import Node, Queue, Task
    from scheduling.spec import Resources, TaskSpec

    queue = Queue.objects.get(name="inference-agent")
    backend = engine.get_backend("local")
    for name in Node.objects.filter(pool=queue.pool).values_list("name", flat=True):
        backend.drain(name, "drained by the poll bench: nothing may start")
    alice = User.objects.get(username=c.DEMO_USER)
    project = Project.objects.get(slug="materials")
    spec = TaskSpec(
        name="poll",
        project="materials",
        type="agent",
        resources=Resources(cpus=1, memory_mib=256),
        walltime_s=300,
        command=("sleep", "1"),
    ).as_dict()
    Task.objects.bulk_create(
        [
            Task(
                project=project,
                owner=alice,
                name=f"poll-{i}",
                descriptor="{}",
                descriptor_format="json",
                spec={**spec, "name": f"poll-{i}"},
                type="agent",
                classify_reason="bench",
                queue=queue,
                routing_reason="bench",
                backend="local",
                state="pending",
                reason="waiting for the dispatcher",
            )
            for i in range(n)
        ],
        batch_size=1000,
    )
    ids = list(Task.objects.filter(state="pending").order_by("pk").values_list("pk", flat=True))
    started = time.perf_counter()
    submitted = 0
    for at in range(0, len(ids), CHUNK):
        outcomes = engine.dispatch_claimed_many(engine.claim_many(ids[at : at + CHUNK]))
        assert set(outcomes.values()) == {"submitted"}, outcomes
        submitted += len(outcomes)
    dispatch_s = time.perf_counter() - started
    active = Task.objects.filter(state__in=("queued", "running")).count()
    assert submitted == active == n, (submitted, active, n)

    steady = []
    for _ in range(3):
        started = time.perf_counter()
        changed = engine.backend_poll("local")
        steady.append(time.perf_counter() - started)
        assert changed == 0, changed
    victims = list(Task.objects.order_by("?").values_list("backend_id", flat=True)[:N_CHANGED])
    for backend_id in victims:
        backend.cancel(backend_id)
    started = time.perf_counter()
    changed = engine.backend_poll("local")
    churn = time.perf_counter() - started
    assert changed == N_CHANGED, changed
    return {
        "jobs": n,
        "dispatch_s": round(dispatch_s, 1),
        "dispatch_per_s": round(n / dispatch_s),
        "steady_cycles_s": [round(s, 3) for s in steady],
        "steady_cycle_s": round(statistics.median(steady), 3),
        "changed": N_CHANGED,
        "cycle_with_changes_s": round(churn, 3),
    }


def _measure(env: dict[str, str]) -> dict[str, Any]:
    c.prepare_site(env)
    argv = [c.PY, __file__, "--child", str(N_JOBS)]
    return c.run_child(argv, env, timeout=900, what="poll bench")


def run() -> dict[str, Any]:
    return {"bench": "poll", "target_s": TARGET_S, **c.per_database("poll", _measure)}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(_child(int(sys.argv[2]))))
    else:
        print(json.dumps(run()))


def summary_rows(result: dict[str, Any]) -> list[str]:
    """The rows of docs/benchmarks.md's summary (bench/run_all.py)."""
    rows = []
    target = result["target_s"]
    for database in ("sqlite", "postgresql"):
        if database in result:
            r = result[database]
            rows.append(
                f"| one poll cycle, {r['jobs']:,} active jobs on the local backend, nothing "
                f"changed, {database} | {r['steady_cycle_s']} s | ≤ {target} s "
                f"| {'**yes**' if r['steady_cycle_s'] <= target else '**no**'} |"
            )
            rows.append(
                f"| one poll cycle, {r['jobs']:,} active jobs, {r['changed']} of them ended, "
                f"{database} | {r['cycle_with_changes_s']} s | ≤ {target} s "
                f"| {'**yes**' if r['cycle_with_changes_s'] <= target else '**no**'} |"
            )
    return rows


def section(result: dict[str, Any]) -> list[str]:
    """The section of docs/benchmarks.md (bench/run_all.py)."""
    out = [
        "## Polling 10,000 active jobs",
        "",
        f"`{COMMAND}`: {__doc__.split(chr(10), 4)[4].strip()}".replace("\n", " "),
        "",
        f"| database | jobs | dispatched (jobs/s) | steady cycles | cycle with {N_CHANGED} ended |",
        "|---|---|---|---|---|",
    ]
    for database in ("sqlite", "postgresql"):
        if database in result:
            r = result[database]
            cycles = ", ".join(f"{s} s" for s in r["steady_cycles_s"])
            out.append(
                f"| {database} | {r['jobs']:,} | {r['dispatch_per_s']} | {cycles} "
                f"| {r['cycle_with_changes_s']} s |"
            )
    return out
