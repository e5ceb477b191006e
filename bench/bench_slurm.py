"""500 tasks dispatched through Switchyard to Slurm versus 500 raw sbatch calls, in one run.

Needs the localhost cluster (`make slurm-up`). The raw side runs exactly the sbatch command
and script the Slurm backend generates for each task (built beforehand, not timed), so the
ratio is the portal's own cost per dispatch: the lease, the look-up skipped on a first
claim, the state change with its event and attempt rows. The two sides alternate in one
process (one raw sbatch, then one dispatch, each timed alone) so both meet the controller
equally loaded; jobs are `true` and are cancelled right after, so the cluster is left idle.

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

N = 500
TARGET_RATIO = 1.2
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
    from scheduling.models import Task, attempt_key
    from scheduling.selectors import site_view
    from scheduling.spec import TaskSpec

    backend = get_backend("slurm")
    alice = User.objects.get(username="alice")
    doc = c.small_descriptor("probe", type="agent", walltime="5m", command=["true"])
    # The raw sbatch does not retry on "Invalid account": the association must exist first,
    # for the account the jobs run as (on a fresh cluster nothing has made it yet).
    backend.ensure_association("materials", backend.service_account)

    tasks = []
    for i in range(n):
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
    # Interleaved, one raw sbatch then one dispatch, each timed on its own: both sides see
    # the same controller, equally loaded by the jobs already queued.
    raw_ids = []
    raw_s = switchyard_s = 0.0
    for (argv, script), task in zip(commands, tasks, strict=True):
        t0 = time.perf_counter()
        raw_ids.append(backend.run(argv, stdin=script).strip().split(";")[0])
        t1 = time.perf_counter()
        engine.task_dispatch(task.pk)
        t2 = time.perf_counter()
        raw_s += t1 - t0
        switchyard_s += t2 - t1

    queued = Task.objects.filter(
        pk__in=[t.pk for t in tasks], state__in=["queued", "running", "succeeded"]
    ).count()
    ours = list(
        Task.objects.filter(pk__in=[t.pk for t in tasks]).values_list("backend_id", flat=True)
    )
    job_ids = raw_ids + [b.partition(":")[0] for b in ours if b]
    for i in range(0, len(job_ids), 200):
        subprocess.run(
            ["scancel", *job_ids[i : i + 200]],
            env={"PATH": "/usr/bin:/bin", "SLURM_CONF": os.environ["SLURM_CONF"]},
            check=False,
        )
    return {
        "bench": "slurm_dispatch",
        "n": n,
        "raw_sbatch_s": round(raw_s, 3),
        "switchyard_s": round(switchyard_s, 3),
        "raw_per_job_ms": round(1000 * raw_s / n, 1),
        "switchyard_per_task_ms": round(1000 * switchyard_s / n, 1),
        "ratio": round(switchyard_s / raw_s, 3),
        "target_ratio": TARGET_RATIO,
        "dispatched": queued,
    }


def run(n: int = N) -> dict[str, Any]:
    cluster = _slurm_env()
    var_dir = c.fresh_var_dir("slurm")
    try:
        env = c.django_env(var_dir, **cluster, SWITCHYARD_SLURM_WORKDIR=str(var_dir / "jobs"))
        c.manage(env, "migrate", "--noinput", "-v", "0")
        c.manage(env, "seed_demo", "--quiet", "--backend", "slurm")
        out = subprocess.run(
            [c.PY, __file__, "--inner", str(n)],
            cwd=c.ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        if out.returncode != 0:
            raise RuntimeError(f"slurm bench failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        c.remove_var_dir(var_dir)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--inner":
        print(json.dumps(_inner(int(sys.argv[2]))))
    else:
        print(json.dumps(run(int(sys.argv[1]) if len(sys.argv) > 1 else N)))
