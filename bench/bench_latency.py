"""Submit → running latency of agent tasks on the local backend (targets: p50 ≤ 200 ms at
5/s, ≤ 100 ms at 20/s, ≤ 250 ms at 50/s).

Run: `.venv/bin/python bench/bench_latency.py` (with `DATABASE_URL=postgres://…` it also runs
on PostgreSQL and Redis). Prints one JSON line; `run()` returns the same dict for
`bench/run_all.py`.

Starts the real stack as subprocesses on a fresh SWITCHYARD_VAR_DIR (migrated and seeded like
`manage.py up` does): gunicorn (config/runtime/serve.py) and `celery -A config worker -B
--concurrency=2` (beat inside the worker; `up` runs it on its own), with beat polling the backends every SWITCHYARD_POLL_MS = 100 ms. Then, in
three phases on that one stack, it submits agent tasks (`type: agent`, 1 cpu, walltime 5m,
`sleep 0.1`) over HTTP, open-loop at a steady rate from 4 keep-alive connections, and waits for
each phase's tasks to end before the next phase:
- `light`: 100 tasks at 5/s;
- `main`: 200 tasks at 20/s (the issue's scenario; the inference-agent pool could run
  thousands at once, so the pool's capacity is never the limit);
- `busy`: 300 tasks at 50/s.

Reported per phase:
- `started`: `started_at - submitted_at` from the API: when the job's process really started
  (the local backend's supervisor records it right after it forks the sandbox);
- `shown_running`: the time of the task's first TaskEvent into `running` or a later state
  (read from the database), minus `submitted_at`: when the portal first *showed* it running
  or already ended (a `sleep 0.1` often ends before the next poll sees it running);
- `queued`: the same for the `queued` event (broker hop, worker, backend submit);
- the worker's own timings from its log: how long each `dispatch` ran, how many backend polls
  ran, and how many beat polls expired unrun in the queue.
Every subprocess is stopped at the end (their process groups), and any job process left
(supervisors and sandboxes under this run's var dir) is killed and counted.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

# name, tasks, submissions per second
PHASES = (("light", 100, 5.0), ("main", 200, 20.0), ("busy", 300, 50.0))
POLL_MS = 100
SUBMITTERS = 4  # client connections sharing the submission schedule
TARGET_P50_MS = {5.0: 200, 20.0: 100, 50.0: 250}  # by submissions per second
TERMINAL = ("succeeded", "failed", "cancelled", "timeout", "skipped")
LATER_THAN_QUEUED = ("running", *TERMINAL)
COMMAND = ".venv/bin/python bench/bench_latency.py (and with DATABASE_URL=postgres://…)"
# The production configuration's broker: a Redis database of its own, emptied before and after.
REDIS_URL = "redis://127.0.0.1:6379/14"
PRODUCTION = "PostgreSQL + Redis"

# More fields of the i-th task's descriptor in a phase.
Extra = Callable[[int], dict[str, Any]]

_DONE_RE = re.compile(r"Task scheduling\.(\w+)\[[^\]]+\] succeeded in ([0-9.]+)s")
_DISCARD_RE = re.compile(r"Discarding revoked task: scheduling\.(\w+)")


def _descriptor(name: str, **extra: Any) -> dict[str, Any]:
    return c.small_descriptor(
        name,
        type="agent",
        resources={"cpus": 1, "memory": "1Gi"},
        walltime="5m",
        command=["sleep", "0.1"],
        **extra,
    )


def _ts(value: str) -> datetime:
    return datetime.fromisoformat(value)


def _submit(
    port: int, token: str, phase: str, n: int, rate: float, extra: Extra | None = None
) -> tuple[list[int], dict]:
    """Open-loop: task i is sent at t0 + i / rate (or as soon as possible if late), from a few
    keep-alive connections, so that one slow answer does not hold back the next ones.
    `extra(i)`: more fields of task i's descriptor (bench_images: its `image`)."""
    ids: list[int | None] = [None] * n
    post_s: list[float] = []
    errors: list[BaseException] = []
    t0 = time.monotonic() + 0.1
    slug = re.sub(r"[^a-z0-9]+", "-", phase.lower()).strip("-")  # a task's name: "warm-5-s-0"

    def submitter(first: int) -> None:
        client = c.Client(port, token)
        try:
            for i in range(first, n, SUBMITTERS):
                delay = t0 + i / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                t = time.monotonic()
                doc = _descriptor(f"{slug}-{i}", **(extra(i) if extra else {}))
                status, data = client.post_json("/api/v1/tasks/", doc)
                post_s.append(time.monotonic() - t)
                if status != 201:
                    raise AssertionError(f"task {i}: POST answered {status}: {str(data)[:500]}")
                ids[i] = data["id"]
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
        finally:
            client.close()

    threads = [threading.Thread(target=submitter, args=(k,)) for k in range(SUBMITTERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    seconds = time.monotonic() - t0
    return [i for i in ids if i is not None], {
        "submit_rate_per_s": round(n / seconds, 1),
        "post_latency": c.summary_ms(post_s),
    }


def _all_tasks(client: c.Client) -> dict[int, dict[str, Any]]:
    tasks: dict[int, dict[str, Any]] = {}
    path = "/api/v1/tasks/"
    while path:
        status, data = client.get_json(path)
        assert status == 200, (status, data)
        tasks.update((t["id"], t) for t in data["results"])
        nxt = data.get("next")
        path = nxt[nxt.index("/api/") :] if nxt else ""
    return tasks


def _first_events(db: Path | str, ids: list[int]) -> dict[int, dict[str, str]]:
    """Per task, the time of its first `queued` and first running-or-later TaskEvent; `db` is
    the SQLite file or a PostgreSQL URL."""
    out: dict[int, dict[str, str]] = {i: {} for i in ids}
    sql = "SELECT task_id, to_state, at FROM scheduling_taskevent ORDER BY at, id"
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db) as conn:
            rows = [(t, state, at.isoformat()) for t, state, at in conn.execute(sql)]
    else:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            rows = conn.execute(sql).fetchall()
    for task_id, to_state, at in rows:
        if task_id not in out:
            continue
        kind = "queued" if to_state == "queued" else "run" if to_state in LATER_THAN_QUEUED else ""
        if kind and kind not in out[task_id]:
            out[task_id][kind] = at
    return out


def _with_image_digest(db: Path | str, ids: list[int]) -> int:
    """How many of the tasks `ids` were resolved to an image digest (their stored spec)."""
    sql = "SELECT id, spec FROM scheduling_task"
    if isinstance(db, str):
        import psycopg

        with psycopg.connect(db) as conn:
            rows = [(i, json.dumps(spec)) for i, spec in conn.execute(sql)]
    else:
        with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
            rows = conn.execute(sql).fetchall()
    wanted = set(ids)
    return sum(1 for i, spec in rows if i in wanted and json.loads(spec).get("image_digest"))


def _db_time(value: str) -> datetime:
    # Django stores aware datetimes in SQLite as naive UTC text.
    return datetime.fromisoformat(value.replace(" ", "T") + ("" if "+" in value else "+00:00"))


def _worker_stats(log_text: str) -> dict[str, Any]:
    runs: dict[str, list[float]] = {}
    for name, seconds in _DONE_RE.findall(log_text):
        runs.setdefault(name, []).append(float(seconds))
    discarded: dict[str, int] = {}
    for name in _DISCARD_RE.findall(log_text):
        discarded[name] = discarded.get(name, 0) + 1
    return {
        "dispatch_run": c.summary_ms(runs.get("dispatch", [])),
        "polls_run": len(runs.get("poll_backends", [])),
        "poll_run_p50_ms": round(c.median(runs.get("poll_backends", [])) * 1000, 1)
        if runs.get("poll_backends")
        else None,
        "polls_expired_unrun": discarded.get("poll_backends", 0),
    }


def _phase(
    port, token, client, worker, db_path, name, n, rate, extra=None, timeout=120
) -> dict[str, Any]:
    log_path = Path(worker.log_path)
    log_from = log_path.stat().st_size
    before = sum(_count_ended(client).values())
    t0 = time.monotonic()
    ids, submit = _submit(port, token, name, n, rate, extra)
    counts = c.wait_until(
        lambda: (lambda k: k if sum(k.values()) >= before + n else None)(_count_ended(client)),
        timeout=timeout,
        what=f"the {n} tasks of phase {name} to end",
        step=0.25,
        procs=[worker],
    )
    drain = time.monotonic() - t0 - n / rate
    with open(log_path, "rb") as f:
        f.seek(log_from)
        worker_log = f.read().decode(errors="replace")

    tasks = _all_tasks(client)
    events = _first_events(db_path, ids)
    started, shown, queued, states = [], [], [], {}
    for task_id in ids:
        task = tasks[task_id]
        states[task["state"]] = states.get(task["state"], 0) + 1
        submitted = _ts(task["submitted_at"])
        if task["started_at"]:
            started.append((_ts(task["started_at"]) - submitted).total_seconds())
        if "run" in events[task_id]:
            shown.append((_db_time(events[task_id]["run"]) - submitted).total_seconds())
        if "queued" in events[task_id]:
            queued.append((_db_time(events[task_id]["queued"]) - submitted).total_seconds())
    del counts
    return {
        "n_tasks": n,
        "submit_rate_target_per_s": rate,
        **submit,
        "seconds_to_drain_after_last_submit": round(drain, 1),
        "started": c.summary_ms(started),
        "shown_running": c.summary_ms(shown),
        "queued": c.summary_ms(queued),
        "states": states,
        "succeeded": states.get("succeeded", 0),
        "with_image_digest": _with_image_digest(db_path, ids),
        "worker": _worker_stats(worker_log),
    }


def _worker_ready(worker) -> bool:
    return " ready." in c.log_tail(worker, 100_000)


def _count_ended(client: c.Client) -> dict[str, int]:
    counts = {}
    for state in TERMINAL:
        status, data = client.get_json(f"/api/v1/tasks/?state={state}")
        assert status == 200, (status, data)
        counts[state] = data["count"]
    return counts


def run(phases=PHASES, poll_ms: int = POLL_MS, keep: bool = False) -> dict[str, Any]:
    """The embedded default (SQLite, filesystem broker); with DATABASE_URL set, the same
    phases again on the production configuration, PostgreSQL and Redis (phase names get
    ", PostgreSQL + Redis")."""
    out = _run_stack(phases, poll_ms, keep)
    if os.environ.get("DATABASE_URL"):
        import redis

        broker = redis.Redis.from_url(REDIS_URL)
        broker.flushdb()
        try:
            with c.fresh_postgres_database(os.environ["DATABASE_URL"]) as url:
                prod = _run_stack(phases, poll_ms, keep, database_url=url, redis_url=REDIS_URL)
        finally:
            broker.flushdb()
        for name, phase in prod["phases"].items():
            out["phases"][f"{name}, {PRODUCTION}"] = phase
        out["job_processes_left"] += prod["job_processes_left"]
        out["job_processes_killed_at_cleanup"] += prod["job_processes_killed_at_cleanup"]
    return out


def _run_stack(
    phases,
    poll_ms: int,
    keep: bool,
    database_url: str | None = None,
    redis_url: str = "",
    *,
    env_extra: dict[str, str] | None = None,
    setup: Callable[[dict[str, str]], None] | None = None,
) -> dict[str, Any]:
    """The stack on a fresh var dir, and `phases` on it in turn: (name, tasks, rate) or
    (name, tasks, rate, {"extra": Extra, "timeout": seconds}). `env_extra`: more settings of
    the portal; `setup(env)`: run once the site is migrated and seeded, before it starts."""
    var_dir = c.fresh_var_dir("latency")
    job_marker = str(var_dir / "local-backend")
    env = c.django_env(
        var_dir, database_url=database_url, SWITCHYARD_POLL_MS=str(poll_ms), **(env_extra or {})
    )
    if redis_url:
        env["REDIS_URL"] = redis_url
    procs = []
    results: dict[str, Any] = {}
    ok = False
    try:
        c.prepare_site(env)
        if setup is not None:
            setup(env)
        port = c.free_port()
        web = c.start(c.gunicorn_argv(port), env, var_dir / "web.log")
        procs.append(web)
        worker = c.start(c.worker_argv(var_dir), env, var_dir / "worker.log")
        procs.append(worker)
        c.wait_until(lambda: c.http_ready(port), timeout=60, what="the web server", procs=procs)
        c.wait_until(lambda: _worker_ready(worker), timeout=60, what="the worker", procs=procs)
        time.sleep(1.0)  # let beat start its schedule
        token = c.get_token(port)
        client = c.Client(port, token)
        db_path = database_url or var_dir / "switchyard.sqlite3"
        for name, n, rate, *options in phases:
            more = options[0] if options else {}
            results[name] = _phase(port, token, client, worker, db_path, name, n, rate, **more)
        client.close()
        # Every supervisor exits once its job has ended: none may be left now.
        time.sleep(0.5)
        # The launcher that forks supervisors stays a while (it is not a job's process).
        launcher = c.launcher_pid(job_marker)
        left = len([p for p in c.processes_mentioning(job_marker) if p != launcher])
        ok = True
    finally:
        for proc in reversed(procs):
            c.stop(proc)
        # The launcher is stopped as it would be (SIGTERM); what is left after it is counted.
        c.stop_launcher(job_marker)
        killed = c.kill_processes_mentioning(job_marker)
        if ok and not keep:
            c.remove_var_dir(var_dir)
        else:
            print(f"bench_latency: logs kept in {var_dir}", file=sys.stderr)

    for name, n, *_ in phases:
        got = results[name]["succeeded"]
        assert got == n, f"phase {name}: {got} of {n} tasks succeeded: {results[name]['states']}"
    return {
        "bench": "latency",
        "poll_ms": poll_ms,
        "target_p50_ms": TARGET_P50_MS,
        "phases": results,
        "job_processes_left": left,
        "job_processes_killed_at_cleanup": killed,
    }


if __name__ == "__main__":
    print(json.dumps(run()))
