"""Restarts lose nothing (docs/deployment.md, "Restarts"): web, worker and beat as a deployment
runs them (`manage.py serve ROLE`), on a PostgreSQL and a Redis of this test's own, while 300
short tasks are submitted over HTTP and run: a worker is SIGKILLed (a supervisor starts
another), Redis restarts, PostgreSQL restarts, the beat is SIGKILLed (another starts).

Then no task is lost, none ran twice (each job appends a line to a file in its task's folder),
none was metered twice, the worker met the Redis restart and went on taking tasks, every
refused submission was a 503 in the error shape with Retry-After, and the reconciliation of
the local backend's accounting against the usage records is clean.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.client import HTTPConnection
from pathlib import Path
from urllib.parse import urlencode

import psycopg
import pytest

from tests.conftest import ROOT, make_job_root, remove_job_root
from tests.servers import PostgresServer, RedisServer, free_port

pytestmark = pytest.mark.integration

TASKS = 300
MANAGE = [sys.executable, str(ROOT / "manage.py")]
# Each real run of a job appends one line: two lines (or two folders) for a task = ran twice.
RUN = ["sh", "-c", "echo ran >> ran; sleep 0.3"]


class Portal:
    """The portal's processes against the test's own servers."""

    def __init__(self, folder: Path, pg: PostgresServer, redis: RedisServer, root: Path) -> None:
        self.folder = folder
        self.root = root
        self.port = free_port()
        self.env = {k: v for k, v in os.environ.items() if k not in ("CELERY_TASK_ALWAYS_EAGER",)}
        self.env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            DATABASE_URL=pg.url,
            REDIS_URL=redis.url,
            SWITCHYARD_VAR_DIR=str(folder / "var"),
            SWITCHYARD_LOCAL_ROOT=str(root),
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            DJANGO_DEBUG="0",
            PYTHONUNBUFFERED="1",
            SWITCHYARD_POLL_MS="300",
            SWITCHYARD_SWEEP_SECONDS="5",
            SWITCHYARD_PENDING_GRACE_SECONDS="8",
            SWITCHYARD_METER_MS="5000",
        )
        self.procs: list[subprocess.Popen] = []

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [*MANAGE, *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, f"manage.py {args}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        return done.stdout

    def serve(self, role: str, *args: str) -> subprocess.Popen:
        log = open(self.folder / f"{role}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [*MANAGE, "serve", role, *args],
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log_path = Path(log.name)  # type: ignore[attr-defined]
        log.close()
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def log_of(proc: subprocess.Popen) -> str:
    return proc.log_path.read_text(errors="replace")  # type: ignore[attr-defined]


def request(port: int, method: str, path: str, body: bytes | None = None, headers=None):
    conn = HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def wait_until(predicate, *, timeout: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class Submitter(threading.Thread):
    """Submits TASKS tasks one after another; a refused one is submitted again until taken."""

    def __init__(self, port: int, token: str) -> None:
        super().__init__(daemon=True)
        self.port, self.token = port, token
        self.accepted: list[int] = []
        self.refusals: list[tuple[int, dict, bytes]] = []
        self.connection_errors = 0

    def run(self) -> None:
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        for i in range(TASKS):
            doc = {
                "apiVersion": "switchyard/v1",
                "kind": "Task",
                "name": f"fault-{i}",
                "project": "materials",
                "resources": {"cpus": 1, "memory": "64Mi"},
                "walltime": "5m",
                "command": RUN,
            }
            body = json.dumps(doc).encode()
            while True:
                try:
                    status, got, data = request(self.port, "POST", "/api/v1/tasks/", body, headers)
                except OSError:
                    self.connection_errors += 1
                    time.sleep(0.5)
                    continue
                if status == 201:
                    self.accepted.append(json.loads(data)["id"])
                    break
                self.refusals.append((status, got, data))
                time.sleep(0.5)
            time.sleep(0.05)


def rows(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.heavy
@pytest.mark.timeout(420)  # ~2.5 min on two busy cores; one run per CI
def test_restarts_of_worker_redis_postgresql_and_beat_lose_nothing_and_repeat_nothing():
    started = time.monotonic()
    # Not pytest's tmp_path: its folders may be cleaned away by another pytest run meanwhile,
    # and the processes' logs are kept when the test fails.
    tmp_path = Path(tempfile.mkdtemp(prefix="switchyard-restarts-"))
    # The storage areas live under its var/: the jobs' accounts pass through to their folders
    # (mkdtemp makes it 0700, which only root could pass).
    tmp_path.chmod(0o711)
    pg = PostgresServer().init().start()
    redis = RedisServer(tmp_path / "redis").start()
    root = make_job_root()
    (tmp_path / "var").mkdir()
    portal = Portal(tmp_path, pg, redis, root)
    try:
        pg.create_database()
        portal.manage("serve", "migrate")
        portal.manage("seed_demo", "--backend", "local", "--quiet")
        web = portal.serve("web", "--addr", f"127.0.0.1:{portal.port}", "--workers", "2")
        worker = portal.serve("worker", "--hostname", "first@fault")
        beat = portal.serve("beat")
        wait_until(lambda: _answers(portal.port), timeout=60, what="the web server")
        token = _token(portal.port)
        submitter = Submitter(portal.port, token)
        submitter.start()

        # The faults, while the submissions go on and the jobs run.
        time.sleep(4)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its pool, as a crash would
        worker.wait()
        worker = portal.serve("worker", "--hostname", "second@fault")  # its supervisor
        wait_until(
            lambda: "second@fault ready." in log_of(worker), timeout=60, what="the second worker"
        )
        time.sleep(2)
        redis.restart(down_seconds=1)
        redis_back = time.time()
        time.sleep(5)
        pg.restart(down_seconds=1)
        time.sleep(4)
        os.killpg(beat.pid, signal.SIGKILL)
        beat.wait()
        beat = portal.serve("beat")

        submitter.join(timeout=120)
        assert not submitter.is_alive(), "the submissions did not finish"
        faults_done = time.monotonic() - started
        url = pg.url

        def all_ended() -> bool:
            [(left,)] = rows(
                url,
                "SELECT count(*) FROM scheduling_task "
                "WHERE state NOT IN ('succeeded', 'failed', 'cancelled')",
            )
            return left == 0

        try:
            wait_until(all_ended, timeout=150, what="every task to end", step=1)
        except AssertionError:
            states = rows(url, "SELECT state, count(*) FROM scheduling_task GROUP BY state")
            raise AssertionError(f"{states}\n{log_of(worker)[-4000:]}") from None

        def metered() -> bool:
            [(unmetered,)] = rows(
                url,
                "SELECT count(*) FROM scheduling_attempt a WHERE NOT "
                "EXISTS (SELECT 1 FROM accounting_usagerecord u WHERE u.attempt_id = a.id)",
            )
            return unmetered == 0

        wait_until(metered, timeout=60, what="every attempt to be metered", step=1)

        # 0 lost: every accepted submission ran and succeeded, and nothing else is there.
        tasks = dict(rows(url, "SELECT id, state FROM scheduling_task"))
        assert len(submitter.accepted) == TASKS
        assert set(submitter.accepted) == set(tasks), "tasks stored that no answer named"
        assert Counter(tasks.values()) == {"succeeded": TASKS}
        # 0 run twice: one attempt each, one backend job each, one line in each job's file.
        attempts = rows(url, "SELECT task_id, key FROM scheduling_attempt")
        assert len(attempts) == TASKS and len({t for t, _ in attempts}) == TASKS
        # Each job works in its task's own folder of the project's storage area (tasks/<id>).
        runs = {
            int(ran.parent.name): ran.read_text().count("ran")
            for ran in (tmp_path / "var").rglob("tasks/*/ran")
        }
        assert set(runs) == set(tasks), "a task whose job never ran (or a folder of none)"
        assert Counter(runs.values()) == {1: TASKS}, "a job ran twice"
        # (The demo site keeps warm sandboxes, `warm-…` folders of no task: docs/sandboxes.md.)
        folders = [p for p in (root / "jobs").iterdir() if not p.name.startswith("warm-")]
        assert len(folders) == TASKS, "a job folder of no attempt"
        # 0 metered twice: one record per attempt and metric.
        assert not rows(
            url,
            "SELECT attempt_id, metric FROM accounting_usagerecord "
            "GROUP BY attempt_id, metric HAVING count(*) > 1",
        )
        # Every refusal was a 503 in the error shape, saying when to try again.
        for status, headers, data in submitter.refusals:
            assert status == 503, (status, data[:300])
            assert int(headers["Retry-After"]) > 0
            [error] = json.loads(data)["errors"]
            assert error["field"] is None and error["message"]
        # The worker met the Redis restart, stayed up and went on taking tasks.
        assert worker.poll() is None, log_of(worker)[-4000:]
        worker_log = log_of(worker)
        assert "Connection to broker lost" in worker_log, worker_log[-4000:]
        [(after,)] = rows(
            url,
            "SELECT count(*) FROM scheduling_attempt WHERE submitted_at > "
            f"to_timestamp({redis_back + 2})",
        )
        assert after > 0, "no task was dispatched after the Redis restart"
        assert web.poll() is None and beat.poll() is None
        # The local backend's own accounting against the usage records.
        outcome = portal.manage("shell", "-c", RECONCILE).strip().splitlines()[-1]
        assert json.loads(outcome) == {"outcome": "clean", "jobs": TASKS}, outcome
        print(
            f"fault test: {TASKS} tasks, {len(submitter.refusals)} refused (503) and submitted "
            f"again, faults over after {faults_done:.0f} s, all done in "
            f"{time.monotonic() - started:.0f} s"
        )
    except BaseException:
        print(f"the processes' logs: {tmp_path}")
        raise
    else:
        shutil.rmtree(tmp_path, ignore_errors=True)
    finally:
        portal.stop_all()
        redis.stop()
        pg.remove()
        remove_job_root(root)


RECONCILE = """
import json
from datetime import timedelta
from django.utils import timezone
from accounting.reconcile import reconcile
now = timezone.now()
r = reconcile("local", now - timedelta(hours=1), now + timedelta(minutes=1))
print(json.dumps({"outcome": r.outcome, "jobs": r.jobs} if r.outcome == "clean" else
                 {"outcome": r.outcome, "jobs": r.jobs, "details": r.details[:5], "error": r.error}))
"""


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError):
        return request(port, "GET", "/api/v1/descriptor-schema/")[0] == 200
    return False


def _token(port: int) -> str:
    body = urlencode({"username": "alice", "password": "alice-demo-pass"}).encode()
    status, _, data = request(
        port,
        "POST",
        "/api/v1/auth/token/",
        body,
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 200, data[:300]
    return json.loads(data)["token"]


@pytest.fixture
def hold_task_table(transactional_db):
    """Blocks every write to the task table until the block ends (a slow database)."""
    from django.db import connection, transaction

    @contextlib.contextmanager
    def hold():
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("LOCK TABLE scheduling_task IN EXCLUSIVE MODE")
            else:  # SQLite: the write lock of the whole file, taken by a first write
                cursor.execute("UPDATE scheduling_task SET id = id WHERE id < 0")
            yield

    return hold


def test_a_worker_survives_a_redis_restart_with_a_task_unacknowledged(
    site, local_root, hold_task_table
):
    from config.celery import app
    from config.runtime.workers import worker_argv
    from tests.integration.conftest import database_url, stop_worker

    folder = Path(tempfile.mkdtemp(prefix="switchyard-redis-restart-"))
    redis = RedisServer(folder / "redis").start()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis.url,
        "SWITCHYARD_LOCAL_ROOT": str(local_root),
    }
    log_path = folder / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            worker_argv(beat_schedule=None, loglevel="INFO", hostname="restart@test"),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def worker_log() -> str:
        return log_path.read_text(errors="replace")

    def send() -> str:
        with app.connection_for_write(redis.url) as conn:
            # Its claim is an UPDATE of the task table: it waits while the table is held.
            return app.send_task("scheduling.dispatch_many", args=[[0]], connection=conn).id

    try:
        wait_until(lambda: "restart@test ready." in worker_log(), timeout=60, what="the worker")
        with hold_task_table():
            slow = send()
            wait_until(lambda: f"{slow}] received" in worker_log(), timeout=20, what="delivery")
            time.sleep(0.5)  # running, not yet acknowledged (acks_late)
            redis.restart(down_seconds=1)
            time.sleep(1)
        wait_until(
            lambda: worker_log().count("Connected to redis") >= 2 or worker.poll(),
            timeout=30,
            what="the worker to reconnect",
        )
        assert worker.poll() is None, worker_log()[-5000:]
        after = send()
        wait_until(
            lambda: f"{after}] succeeded" in worker_log() or worker.poll(),
            timeout=30,
            what="a task taken after the restart",
        )
        assert worker.poll() is None, worker_log()[-5000:]
        assert "Unrecoverable error" not in worker_log()
        # It met the restart once, and did not keep losing its new connection afterwards.
        assert worker_log().count("Connection to broker lost") == 1, worker_log()[-5000:]
    finally:
        stop_worker(worker)
        redis.stop()
    shutil.rmtree(folder, ignore_errors=True)
