"""How many tasks per second the portal accepts through `POST /api/v1/tasks/` (target ≥ 300/s
over HTTP on the production server with PostgreSQL; batches ≥ 3,000/s).

Run: `.venv/bin/python bench/bench_api.py` (or `... --profile /tmp/api.prof` for a cProfile of
the in-process variant instead). Prints one JSON line; `run()` returns the same dict for `bench/run_all.py`.

Each run submits 1,000 small valid JSON descriptors to a portal of its own: a fresh
SWITCHYARD_VAR_DIR (its own SQLite file and filesystem-broker folder) holding the migrated,
`seed_demo`-ed default site. Accepting a task includes everything the API does for it:
token auth, parsing and validating the descriptor, classify/route/check, the INSERTs of the
task, its first event and its audit row, and the dispatch published after commit to the
broker folder by the web process's publisher thread (no worker runs, so the messages stay
there and are counted). Every response must be 201, and afterwards the database must hold
exactly 1,000 tasks and the broker's dispatch messages name each of them exactly once.

Variants:
- `inprocess`: DRF's APIClient with token auth in one process: the portal's own cost per
  request (middleware, DRF, service, ORM, broker), without sockets or an HTTP server.
- `http-gunicorn-cN`: real HTTP/1.1 keep-alive from N client threads (http.client) to
  gunicorn as `manage.py up` starts it (config/runtime/serve.py: cores + 1 processes, 4 threads each).
- `http-gunicorn-batch100-cN`: the same tasks as batches of 100 (`POST /api/v1/tasks/batch/`).
- `http-runserver-cN`: the same against `manage.py runserver --noreload` (what `manage.py up
  --dev` serves with: one process, a thread per connection), for comparison.
- `keepalive_get_probe`: one client, 100 sequential keep-alive GETs of the task list, on
  runserver and on gunicorn: the fixed cost of the HTTP layer.
With DATABASE_URL set, every variant runs again against PostgreSQL (a fresh database per run,
dropped afterwards); without it the PostgreSQL variants are skipped.
Each rate is 1,000 / (time from the first request sent to the last answer received); with
`--repeats R` the median of R runs, each on a fresh portal (`make bench` runs each once, to
stay within its time budget).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import _common as c  # noqa: E402

N_TASKS = 1000
N_BATCH_TASKS = 10_000  # 100 requests of 100: long enough that a worker's start-up is noise
TARGET_PER_S = 300  # single submissions over HTTP, production server (Slurm tuned: 500/s)
TARGET_BATCH_PER_S = 3000
COMMAND = ".venv/bin/python bench/bench_api.py"


# -- one run of each kind --------------------------------------------------------------------


def _bodies(n: int) -> list[bytes]:
    return [json.dumps(c.small_descriptor(f"bench-{i}")).encode() for i in range(n)]


def _inprocess_child(n: int, profile_path: str | None) -> dict[str, Any]:
    """Runs inside a child process whose environment names its var dir (see _run_inprocess)."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from portal.auth import issue_token

    token, _ = issue_token(User.objects.get(username=c.DEMO_USER))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    warm = client.get("/api/v1/tasks/")
    assert warm.status_code == 200, warm.content[:300]
    bodies = _bodies(n)
    statuses: list[int] = []
    latencies: list[float] = []
    profiler = None
    if profile_path:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    start, cpu = time.perf_counter(), time.process_time()
    for body in bodies:
        t = time.perf_counter()
        response = client.post("/api/v1/tasks/", data=body, content_type="application/json")
        latencies.append(time.perf_counter() - t)
        statuses.append(response.status_code)
        if response.status_code != 201:
            raise AssertionError(f"POST answered {response.status_code}: {response.content[:500]}")
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile_path)
    from scheduling.outbox import PUBLISHER

    assert PUBLISHER.flush(30), "the publisher thread did not send every dispatch"
    return {"seconds": seconds, "cpu_seconds": cpu, "statuses": statuses, "latencies": latencies}


BATCH_SIZE = 100


def _batch_child(n: int) -> dict[str, Any]:
    """The same N tasks as a parameter sweep: POST /api/v1/tasks/batch/, BATCH_SIZE a request."""
    import django

    django.setup()
    from django.contrib.auth.models import User
    from rest_framework.test import APIClient

    from portal.auth import issue_token

    token, _ = issue_token(User.objects.get(username=c.DEMO_USER))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.get("/api/v1/tasks/").status_code == 200
    docs = [c.small_descriptor(f"bench-{i}") for i in range(n)]
    bodies = [
        json.dumps({"tasks": docs[i : i + BATCH_SIZE]}).encode() for i in range(0, n, BATCH_SIZE)
    ]
    statuses: list[int] = []
    latencies: list[float] = []
    start = time.perf_counter()
    for body in bodies:
        t = time.perf_counter()
        response = client.post("/api/v1/tasks/batch/", data=body, content_type="application/json")
        latencies.append(time.perf_counter() - t)
        if response.status_code != 201:
            raise AssertionError(f"POST answered {response.status_code}: {response.content[:500]}")
        statuses += [201] * response.json()["count"]
    return {
        "seconds": time.perf_counter() - start,
        "statuses": statuses,
        "latencies": latencies,
    }


def _run_inprocess(
    env: dict[str, str], var_dir: Path, profile_path: str | None = None, batch: bool = False
) -> dict:
    n = N_BATCH_TASKS if batch else N_TASKS
    argv = [c.PY, __file__, "--batch-child" if batch else "--inprocess-child", str(n)]
    if profile_path:
        argv += ["--profile-out", profile_path]
    import subprocess

    out = subprocess.run(argv, cwd=c.ROOT, env=env, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"in-process run failed:\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _server_argv(server: str, port: int) -> list[str]:
    return c.runserver_argv(port) if server == "runserver" else c.gunicorn_argv(port)


def _run_http(
    env: dict[str, str],
    var_dir: Path,
    *,
    clients: int,
    server: str,
    batch: int = 0,
    on_ready: Callable[[int, Any], None] | None = None,
    on_done: Callable[[Any], None] | None = None,
) -> dict:
    """`on_ready(port, proc)`: told once the server answers; `on_done(proc)`: once the last
    answer is in, before the server stops (bench_metrics.py scrapes and reads CPU times)."""
    port = c.free_port()
    proc = c.start(_server_argv(server, port), env, var_dir / "web.log")
    try:
        c.wait_until(lambda: c.http_ready(port), timeout=60, what="the web server", procs=[proc])
        if on_ready is not None:
            on_ready(port, proc)
        token = c.get_token(port)
        conns = [c.Client(port, token) for _ in range(clients)]
        for conn in conns:  # open the connections and warm the server up (creates nothing)
            status, _ = conn.request("GET", "/api/v1/tasks/")
            assert status == 200, status
        if batch:
            docs = [c.small_descriptor(f"bench-{i}") for i in range(N_BATCH_TASKS)]
            bodies = [
                json.dumps({"tasks": docs[i : i + batch]}).encode()
                for i in range(0, N_BATCH_TASKS, batch)
            ]
            path, each = "/api/v1/tasks/batch/", batch
        else:
            bodies, path, each = _bodies(N_TASKS), "/api/v1/tasks/", 1
        counter = itertools.count()
        results: list[list[tuple[int, float, bytes]]] = [[] for _ in range(clients)]
        errors: list[BaseException] = []
        barrier = threading.Barrier(clients + 1)

        def work(i: int) -> None:
            conn, out = conns[i], results[i]
            barrier.wait()
            try:
                while (k := next(counter)) < len(bodies):
                    t = time.perf_counter()
                    status, data = conn.request("POST", path, bodies[k], "application/json")
                    lat = time.perf_counter() - t
                    out += [(status, lat, data if status != 201 else b"")] * each
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        barrier.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
        seconds = time.perf_counter() - start
        if on_done is not None:
            on_done(proc)
        for conn in conns:
            conn.close()
        if errors:
            raise RuntimeError(f"client error: {errors[0]!r}\n{c.log_tail(proc)}")
        # The answers are out; the publisher threads may still hold the last few ids. Give
        # them a moment before the server is stopped (a stopped process's ids are the sweep's
        # in production; here every dispatch must be counted).
        expected = len(bodies) * each
        until = time.monotonic() + 10
        while len(set(c.dispatched_ids(var_dir))) < expected and time.monotonic() < until:
            time.sleep(0.05)
    finally:
        c.stop(proc)
    flat = [r for rs in results for r in rs]
    bad = [(s, d[:300]) for s, _, d in flat if s != 201]
    if bad:
        raise AssertionError(
            f"{len(bad)} responses were not 201, e.g. {bad[:2]}\nserver log:\n{c.log_tail(proc)}"
        )
    return {
        "seconds": seconds,
        "statuses": [s for s, _, _ in flat],
        "latencies": [lat for _, lat, _ in flat],
    }


def _finish(raw: dict, env: dict[str, str], var_dir: Path) -> dict[str, Any]:
    """Check what the run left behind, and reduce it to numbers."""
    tasks = c.count_rows(env, "scheduling_task")
    ids = c.dispatched_ids(var_dir)
    statuses = raw["statuses"]
    n = len(statuses)
    assert n in (N_TASKS, N_BATCH_TASKS) and all(s == 201 for s in statuses), "not all 201"
    assert tasks == n, f"the database holds {tasks} tasks, expected exactly {n}"
    assert len(ids) == len(set(ids)) == n, (
        f"the broker's messages name {len(ids)} dispatches of {len(set(ids))} tasks, "
        f"not each of {n} once; the server said: {_publish_warnings(var_dir)}"
    )
    return {
        "tasks": n,
        "tasks_per_s": n / raw["seconds"],
        "seconds": raw["seconds"],
        "latency": c.summary_ms(raw["latencies"]),
        "messages": sum(
            1 for p in (var_dir / "broker" / "queue").iterdir() if p.name.endswith(".msg")
        ),
    }


def _publish_warnings(var_dir: Path) -> list[str]:
    log = var_dir / "web.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [line for line in lines if "could not enqueue" in line][:5] or ["nothing"]


# -- portals to run against ------------------------------------------------------------------


class _Sites:
    """Fresh portals: for SQLite a copy of one migrated + seeded file per run, for PostgreSQL
    a database cloned from a migrated + seeded template per run."""

    def __init__(self, database: str) -> None:
        self.database = database
        self.stack = contextlib.ExitStack()
        self.template_env: dict[str, str] | None = None

    def __enter__(self) -> _Sites:
        var_dir = c.fresh_var_dir("api-template")
        self.stack.callback(c.remove_var_dir, var_dir)
        if self.database == "sqlite":
            self.template_env = c.django_env(var_dir)
        else:
            url = self.stack.enter_context(c.fresh_postgres_database(os.environ["DATABASE_URL"]))
            self.template_env = c.django_env(var_dir, database_url=url)
        c.prepare_site(self.template_env)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    @contextlib.contextmanager
    def fresh(self, tag: str):
        var_dir = c.fresh_var_dir(f"api-{tag}")
        try:
            assert self.template_env is not None
            if self.database == "sqlite":
                c.clone_sqlite_site(self.template_env, var_dir)
                yield c.django_env(var_dir), var_dir
            else:
                with c.fresh_postgres_database(
                    os.environ["DATABASE_URL"], template=self.template_env["DATABASE_URL"]
                ) as url:
                    yield c.django_env(var_dir, database_url=url), var_dir
        finally:
            c.remove_var_dir(var_dir)


def _variants(concurrency: tuple[int, ...]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [("inprocess", {}), ("inprocess-batch100", {})]
    out += [(f"http-gunicorn-c{n}", {"clients": n, "server": "gunicorn"}) for n in concurrency]
    out.append(("http-gunicorn-batch100-c4", {"clients": 4, "server": "gunicorn", "batch": 100}))
    top = max(concurrency)
    out.append((f"http-runserver-c{top}", {"clients": top, "server": "runserver"}))
    return out


def _keepalive_probe(sites: _Sites, requests: int = 100) -> dict[str, Any]:
    """One client, one keep-alive connection, `requests` sequential GET /api/v1/tasks/ (token
    auth, one small query, ~50 bytes of JSON): the round trip of a request that costs the
    portal a few ms, on runserver and on gunicorn."""
    out = {}
    for server in ("runserver", "gunicorn"):
        with sites.fresh(f"probe-{server}") as (env, var_dir):
            port = c.free_port()
            proc = c.start(_server_argv(server, port), env, var_dir / "web.log")
            try:
                c.wait_until(
                    lambda port=port: c.http_ready(port), timeout=60, what=server, procs=[proc]
                )
                client = c.Client(port, c.get_token(port))
                latencies = []
                for _ in range(requests + 5):
                    t = time.perf_counter()
                    status, _ = client.request("GET", "/api/v1/tasks/")
                    latencies.append(time.perf_counter() - t)
                    assert status == 200, status
                client.close()
            finally:
                c.stop(proc)
            out[server] = c.summary_ms(latencies[5:])
    return out


def run(repeats: int = 1, concurrency: tuple[int, ...] = (8, 16)) -> dict[str, Any]:
    databases = ["sqlite"] + (["postgresql"] if os.environ.get("DATABASE_URL") else [])
    results: dict[str, Any] = {}
    probe: dict[str, Any] = {}
    for database in databases:
        with _Sites(database) as sites:
            for name, kwargs in _variants(concurrency):
                runs = []
                for i in range(repeats):
                    with sites.fresh(f"{name}-{i}") as (env, var_dir):
                        if name.startswith("inprocess"):
                            raw = _run_inprocess(env, var_dir, batch=name.endswith("batch100"))
                        else:
                            raw = _run_http(env, var_dir, **kwargs)
                        runs.append(_finish(raw, env, var_dir))
                rates = [r["tasks_per_s"] for r in runs]
                mid = sorted(runs, key=lambda r: r["tasks_per_s"])[len(runs) // 2]
                results[f"{database}/{name}"] = {
                    "tasks_per_s": round(c.median(rates)),
                    "tasks_per_s_runs": [round(r) for r in rates],
                    "latency_of_median_run": mid["latency"],
                    "messages": mid["messages"],
                    "batch": kwargs.get("batch", 100 if name.endswith("batch100") else 0),
                    "clients": kwargs.get("clients", 1),
                    "server": kwargs.get("server", "none (APIClient)"),
                }
            if database == "sqlite":
                probe = _keepalive_probe(sites)
    return {
        "bench": "api",
        "n_tasks": N_TASKS,
        "n_batch_tasks": N_BATCH_TASKS,
        "repeats": repeats,
        "target_tasks_per_s": TARGET_PER_S,
        "target_batch_tasks_per_s": TARGET_BATCH_PER_S,
        "postgresql": "measured" if "postgresql" in databases else "skipped: DATABASE_URL not set",
        "variants": results,
        "keepalive_get_probe": probe,
    }


def profile(out: str, top: int = 25) -> None:
    """cProfile the in-process variant once, keep the stats in `out`, print the top costs."""
    import pstats

    with _Sites("sqlite") as sites, sites.fresh("profile") as (env, var_dir):
        raw = _run_inprocess(env, var_dir, profile_path=str(Path(out).resolve()))
    print(f"{N_TASKS} POSTs in {raw['seconds']:.2f} s under cProfile; stats in {out}")
    stats = pstats.Stats(out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top + 15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="runs per variant (median)")
    parser.add_argument(
        "--profile",
        metavar="STATS_FILE",
        help="instead: cProfile the in-process run, save the stats, print the top costs",
    )
    parser.add_argument("--inprocess-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    parser.add_argument("--batch-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch_child:
        print(json.dumps(_batch_child(args.batch_child)))
    elif args.inprocess_child:
        print(json.dumps(_inprocess_child(args.inprocess_child, args.profile_out)))
    elif args.profile:
        profile(args.profile)
    else:
        print(json.dumps(run(repeats=args.repeats)))


if __name__ == "__main__":
    main()
