"""Helpers shared by the bench scripts: fresh var dirs, the site, the stack, HTTP, statistics.

Nothing here imports Django: the bench processes drive the portal from outside (subprocesses
with their own SWITCHYARD_VAR_DIR), so one `run_all.py` process can run every bench.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import platform
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from http.client import HTTPConnection
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from config.runtime import serve, workers  # noqa: E402 - the one web and worker command lines

PY = sys.executable
MANAGE = str(ROOT / "manage.py")
HOST = "127.0.0.1"
DEMO_USER, DEMO_PASSWORD = "alice", "alice-demo-pass"  # seed_demo's lead of materials


# -- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0..100), linear between closest ranks (numpy's default)."""
    if not values:
        return math.nan
    data = sorted(values)
    k = (len(data) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return data[lo] + (data[hi] - data[lo]) * (k - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def summary_ms(seconds: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of durations given in seconds, in milliseconds."""
    return {
        "p50_ms": round(percentile(seconds, 50) * 1000, 1),
        "p90_ms": round(percentile(seconds, 90) * 1000, 1),
        "p99_ms": round(percentile(seconds, 99) * 1000, 1),
        "max_ms": round(max(seconds) * 1000, 1) if seconds else math.nan,
        "n": len(seconds),
    }


# -- the machine -----------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "django": version("Django"),
        "djangorestframework": version("djangorestframework"),
        "celery": version("celery"),
        "sqlite": sqlite3.sqlite_version,
        "wsgi_server": "gunicorn " + version("gunicorn"),
    }


# -- fresh var dirs and databases ------------------------------------------------------------


def fresh_var_dir(tag: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"switchyard-bench-{tag}-"))


def django_env(var_dir: Path, *, database_url: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a portal process that owns `var_dir`: its SQLite file (or the given
    database), its filesystem broker folder and its local-backend root."""
    env = dict(os.environ)
    # Nothing of the caller's own portal may leak in: not its broker, root or database.
    for name in ("REDIS_URL", "SWITCHYARD_LOCAL_ROOT", "DATABASE_URL", "CELERY_TASK_ALWAYS_EAGER"):
        env.pop(name, None)
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        SWITCHYARD_VAR_DIR=str(var_dir),
        DJANGO_DEBUG="0",
        # The benches time pages and the API, not the second factor that a platform admin's
        # session must give first (docs/security.md): without this, their pages redirect.
        SWITCHYARD_2FA_REQUIRED_ROLES="",
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
    )
    if database_url:
        env["DATABASE_URL"] = database_url
    if not env.get("DJANGO_SECRET_KEY") and not env.get("DJANGO_SECRET_KEY_FILE"):
        # A bench portal is thrown away with its var dir: a key of its own, never reused.
        env["DJANGO_SECRET_KEY"] = secrets.token_urlsafe(50)
    env.update(extra)
    return env


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    out = subprocess.run(
        [PY, MANAGE, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def prepare_site(env: dict[str, str]) -> None:
    """`migrate` and `seed_demo --quiet` in the environment's var dir / database."""
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "seed_demo", "--quiet")


def clone_sqlite_site(template_env: dict[str, str], var_dir: Path) -> None:
    """Copy a migrated and seeded SQLite file into a fresh var dir (same bytes as running
    `migrate` + `seed_demo` there, without paying ~6 s of start-up for each repeat)."""
    src = Path(template_env["SWITCHYARD_VAR_DIR"]) / "switchyard.sqlite3"
    with contextlib.closing(sqlite3.connect(src)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    var_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, var_dir / "switchyard.sqlite3")


def count_rows(env: dict[str, str], table: str) -> int:
    """Rows of one table of the environment's database, read directly (no Django)."""
    url = env.get("DATABASE_URL")
    if not url:
        path = Path(env["SWITCHYARD_VAR_DIR"]) / "switchyard.sqlite3"
        with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
            return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: S608
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]  # noqa: S608


@contextlib.contextmanager
def fresh_postgres_database(url: str, *, template: str | None = None) -> Iterator[str]:
    """A new database on the server of `url` (a copy of the database of URL `template`, or
    empty), dropped afterwards; yields its URL."""
    import psycopg
    from psycopg import sql

    name = f"switchyard_bench_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(url)
    create = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        source = urlsplit(template).path.lstrip("/")
        create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
            sql.Identifier(name), sql.Identifier(source)
        )
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(create)
    try:
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(drop)


def remove_var_dir(var_dir: Path) -> None:
    shutil.rmtree(var_dir, ignore_errors=True)


def per_database(tag: str, measure: Callable[[dict[str, str]], Any]) -> dict[str, Any]:
    """`measure(env)` on a fresh portal's environment (its own var dir): SQLite, and a fresh
    PostgreSQL database as well when DATABASE_URL is set. {"sqlite": …, "postgresql": …}."""
    out = {}
    for database in ["sqlite"] + (["postgresql"] if os.environ.get("DATABASE_URL") else []):
        var_dir = fresh_var_dir(f"{tag}-{database}")
        try:
            if database == "postgresql":
                with fresh_postgres_database(os.environ["DATABASE_URL"]) as url:
                    out[database] = measure(django_env(var_dir, database_url=url))
            else:
                out[database] = measure(django_env(var_dir))
        finally:
            remove_var_dir(var_dir)
    return out


def run_child(argv: list[str], env: dict[str, str], *, timeout: float, what: str) -> Any:
    """Run a bench's child process in `env`; the JSON of the last line it printed."""
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start(argv: list[str], env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start a process in its own session (so its whole group can be killed), logging to a file."""
    log = open(log_path, "wb")  # noqa: SIM115 - the child holds it; closed in stop()
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log_file = log  # type: ignore[attr-defined]
    proc.log_path = log_path  # type: ignore[attr-defined]
    return proc


def stop(proc: subprocess.Popen, *, grace: float = 10) -> None:
    """SIGTERM the process's whole group, then SIGKILL what is left after `grace` seconds."""
    try:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=grace)
        # The leader may be gone while its children (pool workers, beat) still run.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
    finally:
        log = getattr(proc, "log_file", None)
        if log is not None:
            log.close()


def log_tail(proc: subprocess.Popen, chars: int = 3000) -> str:
    path = getattr(proc, "log_path", None)
    if path is None:
        return ""
    with contextlib.suppress(OSError):
        return Path(path).read_text(errors="replace")[-chars:]
    return ""


def processes_mentioning(marker: str) -> list[int]:
    """Pids (not ours) whose command line contains `marker`, e.g. a bench's unique var dir."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry))
    return found


def launcher_pid(root: str) -> int | None:
    """The pid of the local backend's launcher under `root`, if it wrote one."""
    try:
        return int((Path(root) / "run" / "launcher.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def stop_launcher(root: str, timeout: float = 5.0) -> None:
    """SIGTERM the local backend's launcher under `root` and wait for it to leave."""
    pid = launcher_pid(root)
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + timeout
    while time.monotonic() < end and Path(f"/proc/{pid}").exists():
        time.sleep(0.02)


def kill_processes_mentioning(marker: str) -> int:
    """SIGKILL every process whose command line names `marker` (a path unique to one bench
    run: its job supervisors and sandboxes). Returns how many were found."""
    pids = processes_mentioning(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def runserver_argv(port: int) -> list[str]:
    # Django's development server (`manage.py up --dev`): one process, a thread per
    # connection. Measured beside gunicorn to show what the production server changes.
    return [PY, MANAGE, "runserver", "--noreload", "--skip-checks", f"{HOST}:{port}"]


def gunicorn_argv(port: int, workers: int | None = None) -> list[str]:
    # What `manage.py up` serves with (config/runtime/serve.py).
    return serve.web_argv(f"{HOST}:{port}", workers=workers, python=PY)


def dispatched_ids(var_dir: Path) -> list[int]:
    """The task ids the dispatch messages in a var dir's broker folder name (a message names
    one task, or a batch of them: scheduling/outbox.py)."""
    ids: list[int] = []
    for path in (var_dir / "broker" / "queue").iterdir():
        if not path.name.endswith(".msg"):
            continue
        message = json.loads(path.read_bytes())
        task = message["headers"]["task"]
        body = json.loads(base64.b64decode(message["body"]))
        args = body[0]
        if task == "scheduling.dispatch":
            ids.append(args[0])
        elif task == "scheduling.dispatch_many":
            ids.extend(args[0])
    return ids


def worker_argv(var_dir: Path) -> list[str]:
    # The worker `manage.py up` starts, at INFO to see "ready", with beat inside it (`up` runs
    # beat on its own: with metrics files, which the benches leave off, -B cannot).
    return workers.worker_argv(
        beat_schedule=var_dir / "celerybeat-schedule", loglevel="INFO", python=PY
    )


def wait_until(predicate, *, timeout: float, what: str, step: float = 0.05, procs=()) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{what}: a process exited early:\n{log_tail(proc)}")
        value = predicate()
        if value:
            return value
        time.sleep(step)
    tails = "\n".join(log_tail(p) for p in procs)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}\n{tails}")


# -- HTTP ------------------------------------------------------------------------------------


class Client:
    """One keep-alive HTTP/1.1 connection to the portal, with token auth. Not thread-safe:
    use one per thread."""

    def __init__(self, port: int, token: str | None = None, timeout: float = 60) -> None:
        self.port = port
        self.token = token
        self.conn = HTTPConnection(HOST, port, timeout=timeout)

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> tuple[int, bytes]:
        headers = {}
        if self.token:
            headers["Authorization"] = f"Token {self.token}"
        if content_type:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                return resp.status, data
            except (ConnectionError, OSError) as exc:
                # Only the very first send on a connection the server closed may be retried:
                # a POST is not repeated once it may have been received.
                self.conn.close()
                if attempt == 2 or not isinstance(exc, ConnectionResetError | BrokenPipeError):
                    raise
        raise AssertionError("unreachable")

    def get_json(self, path: str) -> tuple[int, Any]:
        status, data = self.request("GET", path)
        return status, _decode(data)

    def post_json(self, path: str, doc: Any) -> tuple[int, Any]:
        status, data = self.request("POST", path, json.dumps(doc).encode(), "application/json")
        return status, _decode(data)

    def close(self) -> None:
        self.conn.close()


def _decode(data: bytes) -> Any:
    """The JSON of an answer; the text itself when it is not JSON (e.g. an HTML error page)."""
    try:
        return json.loads(data) if data else None
    except ValueError:
        return data.decode(errors="replace")


def http_ready(port: int) -> bool:
    try:
        client = Client(port, timeout=2)
        status, _ = client.request("GET", "/api/v1/descriptor-schema/")
        client.close()
        return status == 200
    except OSError:
        return False


def get_token(port: int, username: str = DEMO_USER, password: str = DEMO_PASSWORD) -> str:
    client = Client(port)
    body = urlencode({"username": username, "password": password}).encode()
    status, data = client.request(
        "POST", "/api/v1/auth/token/", body, "application/x-www-form-urlencoded"
    )
    client.close()
    if status != 200:
        raise RuntimeError(f"could not get a token for {username}: {status} {data[:300]!r}")
    return json.loads(data)["token"]


def small_descriptor(name: str, **overrides: Any) -> dict[str, Any]:
    """A small valid task descriptor (classified as an agent task: 1 cpu, 10 min)."""
    doc: dict[str, Any] = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": name,
        "project": "materials",
        "resources": {"cpus": 1, "memory": "1Gi"},
        "walltime": "10m",
        "command": ["true"],
    }
    doc.update(overrides)
    return doc
