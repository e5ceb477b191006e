"""Live sandboxes over HTTP (docs/sandboxes.md), the whole portal on the local backend, with
the raw floors measured in the same run beside them (bench_sandboxes.floors(): `bwrap true`,
an exec through the agent's socket alone).

Run: `.venv/bin/python bench/bench_sandbox_api.py` (as root: sandboxes run as the job
account; with `DATABASE_URL=postgres://…` the same again on PostgreSQL and Redis). Prints one
JSON line; `run()` returns the same dict for `bench/run_all.py`.

Starts the real stack on a fresh var dir, as bench_latency does: gunicorn and `celery worker
-B` (its beat keeps the warm pool, every 2 s here), with the inference-agent queue's warm pool
at WARM templates of the system. Then, over HTTP with keep-alive connections and a token:
- `warm_create`: POST /api/v1/sandboxes/ one every CREATE_GAP_S (the pool refills between),
  to its 201 `ready` answer; SANDBOXES of them are kept for the next phase;
- `exec`: POST …/exec/ `{"command": ["true"]}` open-loop at EXEC_RATE/s spread over the
  SANDBOXES sandboxes from EXEC_THREADS connections for EXEC_SECONDS; latency from each
  exec's scheduled start (falling behind shows), and the whole system's CPU per exec
  (/proc/stat, all cores: web, database, backend, sandboxes and this client), less what
  the machine spends in the same span idle (measured just before);
- `cold_create`: creates of a shape no pool keeps (2 CPUs) to their 201: submit, start, wait;
- every sandbox deleted; job processes left are counted.
Targets: warm create p50 ≤ 30 ms; exec `true` p50 ≤ 10 ms, p99 ≤ 50 ms.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402
from bench import bench_sandboxes  # noqa: E402

COMMAND = ".venv/bin/python bench/bench_sandbox_api.py (as root)"
SANDBOXES = 20
WARM = 6
CREATES = 30
CREATE_GAP_S = 0.4
EXEC_RATE = 100.0
EXEC_SECONDS = 10.0
EXEC_THREADS = 8
COLD_CREATES = 8
IDLE_SPAN_S = 3.0
TARGETS = {"warm_create_p50_ms": 30, "exec_p50_ms": 10, "exec_p99_ms": 50}
PRODUCTION = "PostgreSQL + Redis"
REDIS_URL = "redis://127.0.0.1:6379/13"  # its own: a flush here touches no other bench
SET_WARM_POOL = (
    "from scheduling.models import Queue; "
    "Queue.objects.filter(name='inference-agent').update(warm_pool={{'': {}}})"
)


def _create(client: c.Client, **fields: Any) -> tuple[float, int, Any]:
    started = time.perf_counter()
    status, data = client.post_json("/api/v1/sandboxes/", {"project": "materials", **fields})
    return (time.perf_counter() - started), status, data


def _warm_creates(client: c.Client) -> tuple[dict[str, Any], list[str]]:
    times, ids, refused = [], [], []
    for _ in range(CREATES):
        took, status, data = _create(client)
        if status != 201:
            refused.append(f"{status} {str(data)[:200]}")
        else:
            times.append(took)
            ids.append(data["id"])
        time.sleep(CREATE_GAP_S)
    return {"n": len(times), "not_ready": refused[:5], **c.summary_ms(times)}, ids


def _execs(port: int, token: str, ids: list[str]) -> dict[str, Any]:
    total = int(EXEC_RATE * EXEC_SECONDS)
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    body = json.dumps({"command": ["true"]}).encode()

    def worker(first: int) -> None:
        client = c.Client(port, token)
        try:
            for i in range(first, total, EXEC_THREADS):
                due = due0 + i / EXEC_RATE
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                path = f"/api/v1/sandboxes/{ids[i % len(ids)]}/exec/"
                status, data = client.request("POST", path, body, "application/json")
                took = time.perf_counter() - due
                with lock:
                    if status == 200 and json.loads(data)["exit_code"] == 0:
                        lat.append(took)
                    else:
                        errors.append(f"{status} {data[:200]!r}")
        finally:
            client.close()

    # The same machine idle (the stack up, the sandboxes waiting) for a few seconds: what
    # would be busy anyway (other processes of the machine) is taken off the execs' CPU.
    idle_from, idle_start = bench_sandboxes._busy_jiffies(), time.perf_counter()
    time.sleep(IDLE_SPAN_S)
    idle_ms_per_s = bench_sandboxes._cpu_ms(idle_from, bench_sandboxes._busy_jiffies()) / (
        time.perf_counter() - idle_start
    )
    due0 = time.perf_counter() + 0.2
    before = bench_sandboxes._busy_jiffies()
    by_command = _ticks_by_command()
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(EXEC_THREADS)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    span = time.perf_counter() - started
    cpu_ms = bench_sandboxes._cpu_ms(before, bench_sandboxes._busy_jiffies())
    where = _where(by_command, _ticks_by_command(), len(lat))
    return {
        "rate_per_s": EXEC_RATE,
        "sandboxes": len(ids),
        "n": len(lat),
        "errors": len(errors),
        "first_errors": errors[:3],
        "achieved_per_s": round(len(lat) / span, 1),
        "cpu_ms_per_exec": round(max(0.0, cpu_ms - idle_ms_per_s * span) / max(1, len(lat)), 2),
        "cpu_ms_per_exec_raw": round(cpu_ms / max(1, len(lat)), 2),
        "idle_cpu_ms_per_s": round(idle_ms_per_s, 1),
        "cpu_ms_per_exec_by_command": where,
        "from_due": c.summary_ms(lat),
    }


def _ticks_by_command() -> dict[str, int]:
    """CPU clock ticks used so far by every process of the machine, summed by command name
    (with what each has reaped of its children: an agent's `true` counts to the agent)."""
    out: dict[str, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            data = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:
            continue
        name = data[data.find(b"(") + 1 : data.rfind(b")")].decode(errors="replace")
        if name == "python":  # the portal's own processes, told apart by their command line
            name = _python_role(pid)
        fields = data[data.rfind(b")") + 2 :].split()
        out[name] = out.get(name, 0) + sum(int(x) for x in fields[11:15])
    return out


def _python_role(pid: str) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "python"
    line = b" ".join(argv).decode(errors="replace")
    for role in ("gunicorn", "celery", "bench_sandbox_api", "manage.py"):
        if role in line:
            return f"python ({role})"
    return "python"


def _where(before: dict[str, int], after: dict[str, int], execs: int) -> dict[str, float]:
    """CPU ms per exec by command name, the six largest (processes that started and ended
    within the span and were not reaped by one measured are missed)."""
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    spent = {n: (after[n] - before.get(n, 0)) * tick_ms / max(1, execs) for n in after}
    top = sorted(spent.items(), key=lambda item: -item[1])[:6]
    return {name: round(ms, 2) for name, ms in top if ms > 0}


def _cold_creates(client: c.Client) -> tuple[dict[str, Any], list[str]]:
    times, ids, other = [], [], []
    for _ in range(COLD_CREATES):
        took, status, data = _create(client, cpus=2)
        if status == 201:
            times.append(took)
            ids.append(data["id"])
        else:
            other.append(f"{status} {str(data)[:200]}")
    return {"n": len(times), "not_ready": other[:5], **c.summary_ms(times)}, ids


def _stack(database_url: str | None = None, redis_url: str = "") -> dict[str, Any]:
    var_dir = c.fresh_var_dir("sandbox-api")
    os.chmod(var_dir, 0o711)  # the job account passes through to its sandbox's files
    marker = str(var_dir / "local-backend")
    # One token plays the many clients of 20 sandboxes: its calls in flight per web process
    # are not bounded to one user's share (docs/sandboxes.md, "Throttling").
    env = c.django_env(
        var_dir,
        database_url=database_url,
        SWITCHYARD_WARM_POOL_SECONDS="2",
        SWITCHYARD_SANDBOX_CALLS_PER_USER=str(EXEC_THREADS),
    )
    if redis_url:
        env["REDIS_URL"] = redis_url
    procs = []
    out: dict[str, Any] = {}
    ok = False
    try:
        c.prepare_site(env)
        c.manage(env, "shell", "-c", SET_WARM_POOL.format(WARM))
        port = c.free_port()
        procs.append(c.start(c.gunicorn_argv(port), env, var_dir / "web.log"))
        procs.append(c.start(c.worker_argv(var_dir), env, var_dir / "worker.log"))
        c.wait_until(lambda: c.http_ready(port), timeout=60, what="the web server", procs=procs)
        time.sleep(6)  # the beat's first warm-pool passes start the pool
        token = c.get_token(port)
        client = c.Client(port, token)
        out["warm_create"], ids = _warm_creates(client)
        live = ids[-SANDBOXES:]
        out["exec"] = _execs(port, token, live)
        out["cold_create"], cold = _cold_creates(client)
        for sid in ids + cold:
            client.request("DELETE", f"/api/v1/sandboxes/{sid}/")
        client.close()
        # The pool's own sandboxes are kept until the pool is emptied: the beat's next pass.
        c.manage(env, "shell", "-c", SET_WARM_POOL.format(0))
        launcher = c.launcher_pid(marker)

        def job_processes() -> list[int]:
            return [p for p in c.processes_mentioning(marker) if p != launcher]

        deadline = time.monotonic() + 15
        while job_processes() and time.monotonic() < deadline:
            time.sleep(0.2)
        launcher = c.launcher_pid(marker)
        out["job_processes_left"] = len(
            [p for p in c.processes_mentioning(marker) if p != launcher]
        )
        ok = True
    finally:
        for proc in reversed(procs):
            c.stop(proc)
        c.stop_launcher(marker)
        out["job_processes_killed_at_cleanup"] = c.kill_processes_mentioning(marker)
        if ok:
            c.remove_var_dir(var_dir)
        else:
            print(f"bench_sandbox_api: logs kept in {var_dir}", file=sys.stderr)
    return out


def run() -> dict[str, Any]:
    out: dict[str, Any] = {
        "bench": "sandbox_api",
        "targets": TARGETS,
        "floors": bench_sandboxes.floors(),
        "sqlite": _stack(),
    }
    if os.environ.get("DATABASE_URL"):
        import redis

        broker = redis.Redis.from_url(REDIS_URL)
        broker.flushdb()
        try:
            with c.fresh_postgres_database(os.environ["DATABASE_URL"]) as url:
                out["postgresql"] = _stack(database_url=url, redis_url=REDIS_URL)
        finally:
            broker.flushdb()
    return out


if __name__ == "__main__":
    print(json.dumps(run()))


# -- docs/benchmarks.md ----------------------------------------------------------------------


def summary_rows(res: dict[str, Any]) -> list[str]:
    rows = []
    floors = res["floors"]
    for name, label in (("sqlite", "SQLite"), ("postgresql", PRODUCTION)):
        got = res.get(name)
        if not got:
            continue
        create, ex = got["warm_create"], got["exec"]["from_due"]
        ok_c = create["p50_ms"] <= TARGETS["warm_create_p50_ms"]
        ok_e = ex["p50_ms"] <= TARGETS["exec_p50_ms"] and ex["p99_ms"] <= TARGETS["exec_p99_ms"]
        rows += [
            f"| sandbox warm create over HTTP ({label}); floor: `bwrap true` "
            f"{floors['bwrap_true']['p50_ms']} ms | p50 {create['p50_ms']} ms | p50 ≤ 30 ms "
            f"| {'**yes**' if ok_c else '**no**'} |",
            f"| sandbox exec `true` over HTTP, {got['exec']['rate_per_s']:g}/s over "
            f"{got['exec']['sandboxes']} sandboxes ({label}); floor: the agent's socket "
            f"{floors['wire_exec']['p50_ms']} ms | p50 {ex['p50_ms']} ms, p99 {ex['p99_ms']} ms, "
            f"{got['exec']['cpu_ms_per_exec']} ms CPU each | p50 ≤ 10 ms, p99 ≤ 50 ms "
            f"| {'**yes**' if ok_e else '**no**'} |",
            f"| sandbox cold create over HTTP ({label}) | p50 {got['cold_create']['p50_ms']} ms "
            "| — | — |",
        ]
    return rows


def section(res: dict[str, Any]) -> list[str]:
    """The section of docs/benchmarks.md (bench/run_all.py)."""

    def row(what: str, s: dict[str, Any]) -> str:
        return (
            f"| {what} | {s['p50_ms']} | {s['p90_ms']} | {s['p99_ms']} | {s['max_ms']} | {s['n']} |"
        )

    out = [
        "## Live sandboxes over HTTP",
        "",
        f"`{COMMAND}`: the portal (gunicorn, a worker with beat keeping a warm pool of {WARM}) "
        "on the local backend, over HTTP with keep-alive connections and a token; the floors "
        "measured in the same run. Warm creates one every "
        f"{CREATE_GAP_S} s to their 201 `ready`; execs of `true` open-loop at {EXEC_RATE:g}/s "
        f"over {SANDBOXES} sandboxes from {EXEC_THREADS} connections, latency from each one's "
        "due time; CPU per exec: the whole machine's (all cores) less its idle rate measured "
        "just before; cold creates of a shape no pool keeps.",
        "",
        "| what | p50 ms | p90 ms | p99 ms | max ms | n |",
        "|---|---|---|---|---|---|",
        row("`bwrap true` (floor of a sandbox start)", res["floors"]["bwrap_true"]),
        row("exec `true` through the agent's socket alone (floor)", res["floors"]["wire_exec"]),
    ]
    for name, label in (("sqlite", "SQLite"), ("postgresql", PRODUCTION)):
        got = res.get(name)
        if not got:
            continue
        ex = got["exec"]
        out += [
            row(f"warm create ({label})", got["warm_create"]),
            row(
                f"exec `true` ({label}; {ex['cpu_ms_per_exec']} ms CPU each, machine idle "
                f"{ex['idle_cpu_ms_per_s']} ms/s)",
                ex["from_due"],
            ),
            row(f"cold create ({label})", got["cold_create"]),
        ]
    return out
