"""Live sandboxes on the local backend (docs/sandboxes.md): the floors and the backend's part of
create and exec, measured in one run.

Run: `.venv/bin/python bench/bench_sandboxes.py` (as root: sandboxes run as the job account).
Prints one JSON line; `run()` returns the same dict for `bench/run_all.py`, and `floors()`
only the raw floors, for a bench that puts the HTTP rows beside them.

A child process (Django settings only, no database, a fresh var dir) drives a LocalBackend
directly, on one virtual node large enough that capacity is never the limit:
- `bwrap_true`: bubblewrap starting `true` in the sandbox every job gets (sandbox.py), as the
  job account, one at a time: the floor of any sandbox's start;
- `wire_exec`: `true` run in an already running sandbox through session/wire.py alone, one at
  a time: the floor of an exec (connect, the agent's fork and exec, the answer);
- `backend_exec`: `true` through `LocalBackend.exec_in`, open-loop at EXEC_RATE/s spread over
  SANDBOXES live sandboxes from EXEC_THREADS threads; latency from each exec's scheduled
  start, so falling behind shows; and the whole system's CPU time per exec (/proc/stat, all
  cores, the client's threads included) beside the same span idle;
- `warm_claim`: `claim_warm` of a session from a pool of WARM_COUNT, one claim every
  CLAIM_GAP_S (the pool refills in between), to the claimed job running;
- `cold_create`: `submit` of a session to its job running (`started`), and to its first exec
  answered (what a create that waits for a usable sandbox costs without a warm pool).
Targets the portal's API must meet over HTTP (the API bench adds those rows): warm create
p50 ≤ 30 ms, exec `true` p50 ≤ 10 ms and p99 ≤ 50 ms at 100 execs/s over 20 sandboxes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

COMMAND = ".venv/bin/python bench/bench_sandboxes.py (as root)"
BWRAP_RUNS = 40
WIRE_EXECS = 400
SANDBOXES = 20
EXEC_RATE = 100.0
EXEC_SECONDS = 10.0
EXEC_THREADS = 8
WARM_COUNT = 4
CLAIMS = 30
CLAIM_GAP_S = 0.25
COLD_CREATES = 20
TARGETS = {"warm_create_p50_ms": 30, "exec_p50_ms": 10, "exec_p99_ms": 50}
# What the backend's part should stay under, so that the API's own work fits the targets.
BACKEND_EXEC_P50_AIM_MS = 3


def _busy_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU since boot, from /proc/stat's first line."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])  # guest time is counted inside user already
    return total - idle, total


def _cpu_ms(before: tuple[int, int], after: tuple[int, int]) -> float:
    return (after[0] - before[0]) * 1000 / os.sysconf("SC_CLK_TCK")


def _process_ticks(pid: int) -> int:
    """utime + stime of a process and of the children it has reaped (clock ticks)."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return 0
    fields = data[data.rfind(b")") + 2 :].split()
    return sum(int(x) for x in fields[11:15])


def _own_ticks(driver: Driver, keys: list[str]) -> int:
    """CPU of what serves these sandboxes: this process, their supervisors, their sandboxes'
    inits and agents (with the commands the agents ran and reaped)."""
    total = _process_ticks(os.getpid())
    for key in keys:
        state = driver.backend.store.read_state(key) or {}
        for name in ("shim_pid", "sandbox_pid"):
            if state.get(name):
                total += _process_ticks(state[name])
        init = state.get("sandbox_pid")
        try:
            children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
        except OSError:
            children = []
        total += sum(_process_ticks(int(pid)) for pid in children)
    return total


class Driver:
    """The child's side: a local backend on a fresh root, and session requests for it."""

    def __init__(self, root: str) -> None:
        from scheduling.backends.local import LocalBackend
        from scheduling.decisions.types import NodeView

        node = NodeView(name="bench-node", cpus=256, memory_mib=1 << 20)
        self.backend = LocalBackend(
            "local-bench", root=root, node_source=lambda _alias: [node], kill_grace_s=0.2
        )
        self.count = 0

    def request(self, *, memory_mib: int = 256, prefix: str = "s") -> Any:
        from scheduling.backends.base import SubmitRequest
        from scheduling.decisions.types import QueuePolicy
        from scheduling.spec import Resources, TaskSpec

        self.count += 1
        key = f"{prefix}-{self.count}"
        spec = TaskSpec(
            name=key,
            project="bench",
            resources=Resources(cpus=1, memory_mib=memory_mib),
            walltime_s=900,
            session_idle_s=300,
        )
        queue = QueuePolicy(name="sandboxes", pool="", task_types=())
        return SubmitRequest(
            key=key, spec=spec, type="sandbox", queue=queue, project="bench", user="bench"
        )

    def start(self, n: int) -> list[str]:
        requests = [self.request() for _ in range(n)]
        keys = [r.key for r in requests]
        self.backend.submit_many(requests)
        left = set(keys)
        end = time.monotonic() + 60
        while left and time.monotonic() < end:
            left -= set(self.backend.started(sorted(left), within_s=1.0))
        if left:
            raise RuntimeError(f"{len(left)} sandboxes did not start within 60 s")
        for key in keys:
            self.wait_answers(key)
        return keys

    def wait_answers(self, key: str) -> None:
        from scheduling.backends.base import BackendError, ExecRequest

        end = time.monotonic() + 30
        while True:
            try:
                self.backend.exec_in(key, ExecRequest(argv=("true",)))
                return
            except BackendError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.005)

    def end(self, keys: list[str]) -> None:
        for key in keys:
            self.backend.cancel(key)


def bwrap_true() -> dict[str, Any]:
    from scheduling.backends.local.accounts import job_account
    from scheduling.backends.local.launch import SITE_ENV
    from scheduling.backends.sandbox import sandbox_argv

    account = job_account(None, "switchyard-job")
    argv = [
        *sandbox_argv("bwrap", writable=[], hide="/srv", chdir="/", tmp_bytes=256 << 20),
        "true",
    ]
    times = []
    for _ in range(BWRAP_RUNS):
        started = time.perf_counter()
        subprocess.run(
            argv,
            check=True,
            env=SITE_ENV,
            user=account[0] if account else None,
            group=account[1] if account else None,
            extra_groups=[] if account else None,
        )
        times.append(time.perf_counter() - started)
    return c.summary_ms(times)


def wire_exec(driver: Driver, key: str) -> dict[str, Any]:
    from scheduling.backends.base import ExecRequest
    from scheduling.backends.session import wire

    path = driver.backend._session_socket(key)
    request = ExecRequest(argv=("true",))
    times = []
    for _ in range(WIRE_EXECS):
        started = time.perf_counter()
        result = wire.exec_in(path, request)
        times.append(time.perf_counter() - started)
        assert result.exit_code == 0
    return c.summary_ms(times)


def backend_exec(driver: Driver, keys: list[str]) -> dict[str, Any]:
    """Open loop: exec i is due at i / EXEC_RATE; each thread takes the next one due."""
    from scheduling.backends.base import ExecRequest

    total = int(EXEC_RATE * EXEC_SECONDS)
    request = ExecRequest(argv=("true",))
    latencies: list[float] = []
    service: list[float] = []
    failures: list[str] = []
    lock = threading.Lock()
    next_index = [0]
    begin = 0.0  # set as the threads start

    def worker() -> None:
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= total:
                return
            due = begin + i / EXEC_RATE
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            started = time.perf_counter()
            try:
                result = driver.backend.exec_in(keys[i % len(keys)], request)
                ok = result.exit_code == 0
            except Exception as exc:  # noqa: BLE001 - counted and reported
                ok, result = False, exc
            ended = time.perf_counter()
            with lock:
                latencies.append(ended - due)
                service.append(ended - started)
                if not ok:
                    failures.append(repr(result)[:200])

    time.sleep(1.0)
    idle_before = _busy_jiffies()
    time.sleep(EXEC_SECONDS)
    idle_ms = _cpu_ms(idle_before, _busy_jiffies())
    threads = [threading.Thread(target=worker) for _ in range(EXEC_THREADS)]
    before, own_before = _busy_jiffies(), _own_ticks(driver, keys)
    wall = time.perf_counter()
    begin = wall + 0.01
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - wall
    busy_ms = _cpu_ms(before, _busy_jiffies())
    own_ms = (_own_ticks(driver, keys) - own_before) * 1000 / os.sysconf("SC_CLK_TCK")
    return {
        "execs": total,
        "sandboxes": len(keys),
        "rate_per_s": EXEC_RATE,
        "achieved_per_s": round(total / wall, 1),
        "failures": len(failures),
        "first_failures": failures[:3],
        "from_due": c.summary_ms(latencies),
        "service": c.summary_ms(service),
        "cpu_ms_per_exec": round(busy_ms / total, 2),
        "cpu_ms_per_exec_over_idle": round((busy_ms - idle_ms * wall / EXEC_SECONDS) / total, 2),
        "idle_cpu_ms_per_s": round(idle_ms / EXEC_SECONDS, 1),
        # The client, supervisors, agents and the commands they ran: no other load in it.
        "own_cpu_ms_per_exec": round(own_ms / total, 2),
        "cores": len(os.sched_getaffinity(0)),
    }


def warm_claim(driver: Driver) -> dict[str, Any]:
    from scheduling.backends.base import JobState, WarmSpec

    spec = WarmSpec(template="", cpus=1, memory_mb=256, count=WARM_COUNT)
    driver.backend.keep_warm([spec])
    end = time.monotonic() + 30
    while driver.backend.keep_warm([spec])[0].ready < WARM_COUNT:
        if time.monotonic() > end:
            raise RuntimeError("the warm pool did not fill within 30 s")
        time.sleep(0.05)
    times, claimed, missed = [], [], 0
    for _ in range(CLAIMS):
        time.sleep(CLAIM_GAP_S)
        request = driver.request(prefix="claim")
        started = time.perf_counter()
        job = driver.backend.claim_warm(request)
        elapsed = time.perf_counter() - started
        if job is None or job.state is not JobState.RUNNING:
            missed += 1
            driver.backend.submit(request)
        else:
            times.append(elapsed)
        claimed.append(request.key)
    first_exec = []
    for key in claimed[:5]:
        started = time.perf_counter()
        driver.wait_answers(key)
        first_exec.append(time.perf_counter() - started)
    driver.end(claimed)
    driver.backend.keep_warm([])
    return {
        "pool": WARM_COUNT,
        "claims": CLAIMS,
        "missed": missed,
        "claim": c.summary_ms(times),
        "first_exec_after_claim": c.summary_ms(first_exec),
    }


def cold_create(driver: Driver) -> dict[str, Any]:
    to_running, to_exec, keys = [], [], []
    for _ in range(COLD_CREATES):
        request = driver.request(prefix="cold")
        started = time.perf_counter()
        driver.backend.submit(request)
        if not driver.backend.started([request.key], within_s=10.0):
            raise RuntimeError(f"{request.key} did not start within 10 s")
        to_running.append(time.perf_counter() - started)
        driver.wait_answers(request.key)
        to_exec.append(time.perf_counter() - started)
        keys.append(request.key)
    driver.end(keys)
    return {
        "submit_to_running": c.summary_ms(to_running),
        "submit_to_first_exec": c.summary_ms(to_exec),
    }


def _child(which: str, root: str) -> dict[str, Any]:
    import django

    django.setup()
    out: dict[str, Any] = {"bwrap_true": bwrap_true()}
    driver = Driver(root)
    try:
        keys = driver.start(SANDBOXES)
        out["wire_exec"] = wire_exec(driver, keys[0])
        if which == "all":
            out["backend_exec"] = backend_exec(driver, keys)
            driver.end(keys)
            out["warm_claim"] = warm_claim(driver)
            out["cold_create"] = cold_create(driver)
        else:
            driver.end(keys)
    finally:
        driver.backend.keep_warm([])
        driver.backend.close()
    return out


def _measure(which: str) -> dict[str, Any]:
    var_dir = c.fresh_var_dir("sandboxes")
    os.chmod(var_dir, 0o711)  # the job account passes through to its sandbox's files
    try:
        env = c.django_env(var_dir)
        argv = [c.PY, __file__, "--child", which, str(var_dir / "local")]
        return c.run_child(argv, env, timeout=600, what="sandboxes bench")
    finally:
        c.remove_var_dir(var_dir)


def floors() -> dict[str, Any]:
    """The raw floors alone (`bwrap true`, an exec through the wire), for another bench."""
    return _measure("floors")


def run() -> dict[str, Any]:
    return {
        "bench": "sandboxes",
        "targets": TARGETS,
        "backend_exec_p50_aim_ms": BACKEND_EXEC_P50_AIM_MS,
        **_measure("all"),
    }


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        print(json.dumps(_child(sys.argv[2], sys.argv[3])))
    else:
        print(json.dumps(run()))


# -- docs/benchmarks.md ----------------------------------------------------------------------


def summary_rows(res: dict[str, Any]) -> list[str]:
    """The rows of docs/benchmarks.md's summary (bench/run_all.py): the backend's part, beside
    its floors; the API's rows (over HTTP) are its own bench's."""
    ex, claim = res["backend_exec"], res["warm_claim"]["claim"]
    aim = res["backend_exec_p50_aim_ms"]
    p50, p99 = ex["from_due"]["p50_ms"], ex["from_due"]["p99_ms"]
    return [
        f"| sandbox exec `true`, local backend (no HTTP), {ex['rate_per_s']:g}/s over "
        f"{ex['sandboxes']} sandboxes; floor: exec through the agent's socket alone "
        f"{res['wire_exec']['p50_ms']} ms | p50 {p50} ms, p99 {p99} ms | p50 ≤ {aim} ms "
        f"| {'**yes**' if p50 <= aim else '**no**'} |",
        f"| sandbox warm claim, local backend (no HTTP); floor: `bwrap true` "
        f"{res['bwrap_true']['p50_ms']} ms | p50 {claim['p50_ms']} ms | — | — |",
        f"| sandbox cold create to its first exec, local backend (no HTTP) "
        f"| p50 {res['cold_create']['submit_to_first_exec']['p50_ms']} ms | — | — |",
    ]


def section(res: dict[str, Any]) -> list[str]:
    """The section of docs/benchmarks.md (bench/run_all.py)."""
    ex = res["backend_exec"]

    def row(what: str, s: dict[str, Any]) -> str:
        return (
            f"| {what} | {s['p50_ms']} | {s['p90_ms']} | {s['p99_ms']} | {s['max_ms']} | {s['n']} |"
        )

    return [
        "## Live sandboxes: the local backend's part",
        "",
        f"`{COMMAND}`: a LocalBackend driven directly (no HTTP, no database) on one virtual "
        "node large enough that capacity is never the limit; sandboxes of 1 cpu and 256 MiB "
        "as the job account, with no network. The floors are measured in the same run: "
        "bubblewrap starting `true` in the sandbox every job gets, and `true` run in an already "
        f"running sandbox through the agent's socket alone (session/wire.py). Execs go "
        f"open-loop from {EXEC_THREADS} threads, latency counted from each one's due time. "
        f"Warm claims: one every {CLAIM_GAP_S} s from a pool of {WARM_COUNT} (refilled in the "
        "background). The API's own rows (over HTTP) are its bench's.",
        "",
        "| what | p50 ms | p90 ms | p99 ms | max ms | n |",
        "|---|---|---|---|---|---|",
        row("`bwrap true` (floor of a sandbox start)", res["bwrap_true"]),
        row("exec `true` through the agent's socket alone (floor of an exec)", res["wire_exec"]),
        row(
            f"exec `true` through the backend, {ex['rate_per_s']:g}/s over {ex['sandboxes']} "
            "sandboxes, from its due time",
            ex["from_due"],
        ),
        row("warm claim (to the claimed session running)", res["warm_claim"]["claim"]),
        row("cold create: submit to running", res["cold_create"]["submit_to_running"]),
        row(
            "cold create: submit to its first exec answered",
            res["cold_create"]["submit_to_first_exec"],
        ),
        "",
        f"CPU per exec: {ex['own_cpu_ms_per_exec']} ms of the client, supervisors, agents and "
        f"the commands they ran; the whole system's (/proc/stat, {ex['cores']} cores) "
        f"{ex['cpu_ms_per_exec']} ms, {ex['cpu_ms_per_exec_over_idle']} ms over the same span "
        f"idle ({ex['idle_cpu_ms_per_s']} ms/s of CPU were busy with other work then). "
        f"{ex['failures']} execs failed; {res['warm_claim']['missed']} of "
        f"{res['warm_claim']['claims']} claims found no warm sandbox.",
    ]
