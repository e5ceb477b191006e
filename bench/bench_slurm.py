"""1,000 tasks dispatched through Switchyard to Slurm versus 1,000 raw sbatch calls, in one run
(target: ≤ 1.1 × the raw time).

Needs the localhost cluster (`make slurm-up`). The raw side runs exactly the sbatch command
and script the Slurm backend generates for each task (built beforehand, not timed), one call
after another, as a script looping over sbatch would. The Switchyard side is what a worker
does with a batch of pending tasks (`dispatch_many`, or a `dispatch` taking its backlog): one
claim of 50 tasks, then `dispatch_claimed_many` — admission, the state change with its event
and attempt rows, and the backend's `submit_many`, which runs `submit_concurrency` (4)
sbatch calls at once. The two sides alternate in blocks of 50 (raw first in even blocks, the
portal first in odd ones) so both meet the controller equally loaded. Beside it, 100 more
tasks dispatched one at a time (`task_dispatch`, interleaved with as many raw calls): the
portal's own cost per task when nothing is batched. The partition is down while both sides
submit, so the jobs (`true`) queue and none starts: job start-ups on this 2-core machine load
neither side; they are cancelled right after and the partition is brought back up.

Run: `.venv/bin/python bench/bench_slurm.py` (prints one JSON line).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

N = 1000
N_SINGLE = 100
BLOCK = 50  # a worker's claim (scheduling/tasks.py CLAIM_AT_ONCE)
TARGET_RATIO = 1.1
COMMAND = ".venv/bin/python bench/bench_slurm.py"
SLURM_DIR = Path(os.environ.get("SWITCHYARD_SLURM_DIR", "/var/tmp/switchyard-slurm"))


def _slurm_env() -> dict[str, str]:
    env = {}
    path = SLURM_DIR / "env"
    if not path.exists():
        raise RuntimeError(f"no Slurm cluster: {path} is missing (run `make slurm-up`)")
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            name, _, value = line[len("export ") :].partition("=")
            env[name] = value
    return env


def _inner(n: int) -> dict[str, Any]:
    """Runs inside a process whose environment points at a fresh var dir and the cluster."""
    import django

    django.setup()
    from django.contrib.auth.models import User

    from scheduling import engine, services
    from scheduling.backends import SubmitRequest
    from scheduling.engine import get_backend
    from scheduling.models import Queue, Task, attempt_key
    from scheduling.selectors import site_view, site_view_invalidate
    from scheduling.spec import TaskSpec

    backend = get_backend("slurm")
    alice = User.objects.get(username="alice")
    doc = c.small_descriptor("probe", type="agent", walltime="5m", command=["true"])
    # The raw sbatch does not retry on "Invalid account": the association must exist first,
    # for the account the jobs run as (on a fresh cluster nothing has made it yet).
    backend.ensure_association("materials", backend.service_account)

    # The jobs queue (the partition is down) and are cancelled after: the queue's
    # max_concurrency (500, which the engine now holds on Slurm too) is not what is measured.
    Queue.objects.filter(name="inference-agent").update(max_concurrency=None)
    site_view_invalidate()
    tasks = []
    for i in range(n + N_SINGLE):
        doc["name"] = f"sw{i}"
        tasks.append(services.task_submit(user=alice, text=json.dumps(doc), fmt="json"))

    # Raw: the same sbatch invocations, generated for a twin key each.
    site = site_view()
    requests = [
        SubmitRequest(
            key=attempt_key(t.pk, 1, "rawrun"),
            spec=TaskSpec.from_dict(t.spec),
            type=t.type,
            queue=site.queues[t.queue.name],
            project="materials",
            user="alice",
        )
        for t in tasks
    ]
    commands = [backend.sbatch_command(r) for r in requests]
    raw_ids: list[str] = []

    def raw(block) -> float:
        t0 = time.perf_counter()
        for argv, script in block:
            raw_ids.append(backend.run(argv, stdin=script).strip().split(";")[0])
        return time.perf_counter() - t0

    def ours(block) -> float:
        t0 = time.perf_counter()
        outcomes = engine.dispatch_claimed_many(engine.claim_many([t.pk for t in block]))
        assert list(outcomes.values()) == ["submitted"] * len(block), outcomes
        return time.perf_counter() - t0

    # The partition is down while both sides submit: jobs queue and none starts, so job
    # start-ups on this small machine load neither side.
    partition = tasks[0].queue.name
    _partition_state(partition, "DOWN")
    try:
        raw_s = switchyard_s = 0.0
        for b, at in enumerate(range(0, n, BLOCK)):
            block = (commands[at : at + BLOCK], tasks[at : at + BLOCK])
            if b % 2 == 0:
                raw_s += raw(block[0])
                switchyard_s += ours(block[1])
            else:
                switchyard_s += ours(block[1])
                raw_s += raw(block[0])

        # One at a time, interleaved call by call: the portal's own cost per task.
        single_raw_s = single_s = 0.0
        for command, task in zip(commands[n:], tasks[n:], strict=True):
            single_raw_s += raw([command])
            t0 = time.perf_counter()
            engine.task_dispatch(task.pk)
            single_s += time.perf_counter() - t0
    finally:
        _partition_state(partition, "UP")

    queued = Task.objects.filter(
        pk__in=[t.pk for t in tasks], state__in=["queued", "running", "succeeded"]
    ).count()
    ours_ids = list(
        Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("backend_id", flat=True)
    )
    job_ids = raw_ids + [b.partition(":")[0] for b in ours_ids if b]
    for i in range(0, len(job_ids), 200):
        subprocess.run(
            ["scancel", *job_ids[i : i + 200]],
            env={"PATH": "/usr/bin:/bin", "SLURM_CONF": os.environ["SLURM_CONF"]},
            check=False,
        )
    return {
        "bench": "slurm_dispatch",
        "n": n,
        "block": BLOCK,
        "submit_concurrency": backend.submit_concurrency,
        "raw_sbatch_s": round(raw_s, 3),
        "switchyard_s": round(switchyard_s, 3),
        "raw_per_job_ms": round(1000 * raw_s / n, 1),
        "switchyard_per_task_ms": round(1000 * switchyard_s / n, 1),
        "ratio": round(switchyard_s / raw_s, 3),
        "target_ratio": TARGET_RATIO,
        "single_n": N_SINGLE,
        "single_raw_per_job_ms": round(1000 * single_raw_s / N_SINGLE, 1),
        "single_per_task_ms": round(1000 * single_s / N_SINGLE, 1),
        "single_ratio": round(single_s / single_raw_s, 3),
        "dispatched": queued,
    }


def _partition_state(partition: str, state: str) -> None:
    subprocess.run(
        ["scontrol", "update", f"PartitionName={partition}", f"State={state}"],
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": os.environ["SLURM_CONF"]},
        check=True,
    )


def summary_rows(r: dict[str, Any]) -> list[str]:
    """The rows of docs/benchmarks.md's summary (bench/run_all.py)."""
    met = "**yes**" if r["ratio"] <= r["target_ratio"] else "**no**"
    return [
        f"| {r['n']:,} tasks dispatched to Slurm in claims of {r['block']} vs {r['n']:,} raw "
        f"sbatch, interleaved ({r['switchyard_per_task_ms']} vs {r['raw_per_job_ms']} ms each) "
        f"| {r['ratio']}× | ≤ {r['target_ratio']}× | {met} |",
        f"| {r['single_n']} tasks dispatched to Slurm one at a time vs as many raw sbatch "
        f"({r['single_per_task_ms']} vs {r['single_raw_per_job_ms']} ms each) "
        f"| {r['single_ratio']}× | — (the portal's own cost per task) | — |",
    ]


def section(r: dict[str, Any]) -> list[str]:
    """The section of docs/benchmarks.md (bench/run_all.py)."""
    return [
        "## Dispatch to Slurm",
        "",
        f"`{COMMAND}`: {__doc__.split(chr(10), 3)[3].split('Run:')[0].strip()}".replace("\n", " "),
        "",
        "| side | tasks | total | each |",
        "|---|---|---|---|",
        f"| raw sbatch, one after another | {r['n']:,} | {r['raw_sbatch_s']} s "
        f"| {r['raw_per_job_ms']} ms |",
        f"| Switchyard, claims of {r['block']}, {r['submit_concurrency']} sbatch at once "
        f"| {r['n']:,} | {r['switchyard_s']} s | {r['switchyard_per_task_ms']} ms |",
        f"| raw sbatch (the one-at-a-time comparison) | {r['single_n']} | — "
        f"| {r['single_raw_per_job_ms']} ms |",
        f"| Switchyard, one task a dispatch | {r['single_n']} | — | {r['single_per_task_ms']} ms |",
    ]


def run(n: int = N) -> dict[str, Any]:
    cluster = _slurm_env()
    var_dir = c.fresh_var_dir("slurm")
    try:
        env = c.django_env(var_dir, **cluster, SWITCHYARD_SLURM_WORKDIR=str(var_dir / "jobs"))
        c.manage(env, "migrate", "--noinput", "-v", "0")
        c.manage(env, "seed_demo", "--quiet", "--backend", "slurm")
        return c.run_child(
            [c.PY, __file__, "--inner", str(n)], env, timeout=900, what="slurm bench"
        )
    finally:
        c.remove_var_dir(var_dir)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--inner":
        print(json.dumps(_inner(int(sys.argv[2]))))
    else:
        print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else N)))
