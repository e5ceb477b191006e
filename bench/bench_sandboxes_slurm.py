"""Live sandboxes on the localhost Slurm (docs/sandbox-slurm.md), beside Slurm's own floors in
the same run: a session's create → ready (sbatch until its agent answers through an exec
step) against a plain job's sbatch → RUNNING; an exec of `true` in the session (an
`srun --jobid --overlap` step running the relay, which hands the request to the agent) against
`srun --jobid --overlap true` alone and `srun … python3 -I -S -c pass` (the relay's
interpreter start) into the same job, as the same account, interleaved so all meet the
controller equally loaded.

Needs the localhost cluster (`make slurm-up`). Jobs go to the agents' partition as the job
account; every job is cancelled at the end.

Run: `.venv/bin/python bench/bench_sandboxes_slurm.py` (prints one JSON line).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench.bench_slurm import _slurm_env  # noqa: E402

N_CREATE = 5
N_EXEC = 60
COMMAND = ".venv/bin/python bench/bench_sandboxes_slurm.py"
PARTITION = "inference-agent"


def _inner() -> dict[str, Any]:
    """Runs inside a process whose environment points at a fresh var dir and the cluster."""
    import django

    django.setup()
    from django.conf import settings

    from scheduling.backends import SubmitRequest
    from scheduling.backends.base import BackendError, ExecRequest
    from scheduling.decisions.types import QueuePolicy
    from scheduling.engine import get_backend
    from scheduling.spec import Resources, TaskSpec

    slurm = get_backend("slurm")
    account = settings.SWITCHYARD_JOB_ACCOUNT
    queue = QueuePolicy(name=PARTITION, pool=PARTITION, task_types=("sandbox",))

    def request(key: str, *, session: bool) -> SubmitRequest:
        spec = TaskSpec(
            name=key,
            project="bench-sandboxes",
            command=("sleep", "600"),
            walltime_s=600,
            resources=Resources(cpus=1, memory_mib=256),
            session_idle_s=120 if session else None,
        )
        return SubmitRequest(
            key=key, spec=spec, type="sandbox", queue=queue, project="bench-sandboxes", user="b"
        )

    def running(backend_id: str) -> None:
        job_id = backend_id.partition(":")[0]
        while slurm.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip() != "RUNNING":
            time.sleep(0.01)

    def ready(backend_id: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                slurm.session_ping(backend_id, timeout_s=15)
                return
            except BackendError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    jobs: list[str] = []
    sessions: list[str] = []
    try:
        # A job first, not timed: the project's Slurm account is made on its first sbatch.
        warm = slurm.submit(request(f"bench-sbx-{uuid.uuid4().hex[:10]}", session=False))
        jobs.append(warm.backend_id)
        running(warm.backend_id)
        # sbatch → RUNNING (a plain job) and sbatch → RUNNING → ready (a session), alternating.
        plain, created, starts, readies = [], [], [], []
        for i in range(N_CREATE):
            for session in (i % 2 == 0, i % 2 == 1):
                key = f"bench-sbx-{uuid.uuid4().hex[:10]}"
                t = time.perf_counter()
                backend_id = slurm.submit(request(key, session=session)).backend_id
                jobs.append(backend_id)
                running(backend_id)
                started = time.perf_counter()
                if not session:
                    plain.append(started - t)
                    continue
                sessions.append(backend_id)
                ready(backend_id)
                created.append(time.perf_counter() - t)
                starts.append(started - t)
                readies.append(time.perf_counter() - started)
        session_id = sessions[0]
        # Execs: the session's `true` beside raw srun steps into the same job, interleaved.
        job_id = session_id.partition(":")[0]
        uid, gid = slurm._session_account(session_id.partition(":")[2])
        env = {"PATH": "/usr/bin:/bin", "SLURM_CONF": slurm.slurm_conf or ""}
        srun = ["srun", f"--jobid={job_id}", "--overlap", "-N1", "-n1", "--quiet", "--chdir=/"]

        def raw(*argv: str) -> float:
            t = time.perf_counter()
            subprocess.run(
                [*srun, *argv], env=env, user=uid, group=gid, extra_groups=[], check=True
            )
            return time.perf_counter() - t

        true = ExecRequest(argv=("true",), timeout_s=30)
        execs, srun_true, srun_python = [], [], []
        for _ in range(N_EXEC):
            t = time.perf_counter()
            assert slurm.exec_in(session_id, true).exit_code == 0
            execs.append(time.perf_counter() - t)
            srun_true.append(raw("true"))
            srun_python.append(raw("python3", "-I", "-S", "-c", "pass"))
    finally:
        for backend_id in jobs:
            slurm.cancel(backend_id)
    return {
        "bench": "sandboxes_slurm",
        "account": account,
        "n_create": N_CREATE,
        "n_exec": N_EXEC,
        "create_ready_ms": c.summary_ms(created),
        "sbatch_running_ms": c.summary_ms(plain),
        "session_sbatch_running_ms": c.summary_ms(starts),
        "session_running_ready_ms": c.summary_ms(readies),
        "exec_true_ms": c.summary_ms(execs),
        "srun_true_ms": c.summary_ms(srun_true),
        "srun_python_ms": c.summary_ms(srun_python),
    }


def summary_rows(r: dict[str, Any]) -> list[str]:
    """The rows of docs/benchmarks.md's summary (bench/run_all.py)."""
    return [
        f"| Slurm live sandbox: create → ready p50 (beside sbatch → RUNNING "
        f"{r['sbatch_running_ms']['p50_ms']} ms) | {r['create_ready_ms']['p50_ms']} ms | — (stated) "
        "| — |",
        f"| Slurm live sandbox: exec `true` p50 (beside `srun --overlap true` "
        f"{r['srun_true_ms']['p50_ms']} ms) | {r['exec_true_ms']['p50_ms']} ms | — (stated) | — |",
    ]


def section(r: dict[str, Any]) -> list[str]:
    """The section of docs/benchmarks.md (bench/run_all.py)."""
    rows = [
        ("session create → agent answers", r["create_ready_ms"], r["n_create"]),
        ("… of which sbatch → RUNNING", r["session_sbatch_running_ms"], r["n_create"]),
        ("… of which RUNNING → agent answers", r["session_running_ready_ms"], r["n_create"]),
        ("plain job: sbatch → RUNNING", r["sbatch_running_ms"], r["n_create"]),
        ("session exec `true`", r["exec_true_ms"], r["n_exec"]),
        ("`srun --jobid --overlap true`", r["srun_true_ms"], r["n_exec"]),
        ("`srun --jobid --overlap python3 -I -S -c pass`", r["srun_python_ms"], r["n_exec"]),
    ]
    return [
        "## Live sandboxes on Slurm",
        "",
        f"`{COMMAND}`: " + " ".join((__doc__ or "").split("Run:")[0].split()),
        "",
        "| what | n | p50 | p90 | max |",
        "|---|---|---|---|---|",
        *(
            f"| {what} | {n} | {s['p50_ms']} ms | {s['p90_ms']} ms | {s['max_ms']} ms |"
            for what, s, n in rows
        ),
    ]


def run() -> dict[str, Any]:
    cluster = _slurm_env()
    var_dir = c.fresh_var_dir("sandboxes-slurm")
    var_dir.chmod(0o711)  # the job account reaches its job folders under it
    try:
        env = c.django_env(var_dir, **cluster, SWITCHYARD_SLURM_WORKDIR=str(var_dir / "jobs"))
        return c.run_child([c.PY, __file__, "--inner"], env, timeout=600, what="slurm sandboxes")
    finally:
        c.remove_var_dir(var_dir)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--inner":
        print(json.dumps(_inner()))
    else:
        print(json.dumps(run()))
