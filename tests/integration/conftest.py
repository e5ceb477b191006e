"""Integration fixtures: a real Celery worker process on the configured broker and database.

`.ci/run` switches on PostgreSQL and Redis (DATABASE_URL, REDIS_URL). Without them the same
tests run on the embedded default (SQLite file, filesystem broker). In CI a service that is
configured but unreachable fails the test; it never skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from config.runtime.workers import worker_argv
from scheduling.outbox import PUBLISHER
from tests.conftest import ROOT, move_storage_areas, no_lease_schedules


def wait_for(predicate: Callable[[], object], *, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def database_url() -> str:
    """The URL of the test database this process uses, for a worker process to share."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    return f"postgres://{s['USER'] or 'postgres'}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.fixture
def local_root(settings, job_root) -> Path:
    """One local-backend root shared by this test process and the worker it starts."""
    root = job_root
    settings.COMPUTE_BACKENDS = {
        **settings.COMPUTE_BACKENDS,
        "local": {
            "BACKEND": "scheduling.backends.local.LocalBackend",
            "RUNS_ON_THIS_HOST": True,
            "OPTIONS": {"root": str(root), "bwrap": "bwrap"},
        },
    }
    return root


@pytest.fixture
def site(transactional_db, local_root) -> Iterator[Path]:
    """The default site on the local backend, committed so a worker process sees it, its
    storage areas in a fresh folder of this test's (`fresh_storage_areas`, yielded)."""
    call_command("seed_demo", backend="local", quiet=True)
    no_lease_schedules()
    with fresh_storage_areas() as root:
        yield root


@contextlib.contextmanager
def fresh_storage_areas() -> Iterator[Path]:
    """The demo site's storage areas moved to a fresh folder (the jobs' accounts pass through
    the var dir to it), removed afterwards: nothing an earlier test left in a project's
    folder is in this one's way. A task's own folder is `tasks/<id>`, and each run's test
    database hands the same ids out again: a run in one process (no xdist worker to empty
    its var folder) would find an earlier run's folder of that name, maybe another
    account's, and the task would refuse it as planted."""
    root = Path(settings.VAR_DIR) / "storage-tests" / uuid.uuid4().hex[:10]
    move_storage_areas(root)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def alice_account(site) -> None:
    """alice's jobs run as her own account, sy-alice; request it before `storage_root`,
    which makes her folders."""
    from django.contrib.auth.models import User

    from portal.models import ClusterAccount

    alice = User.objects.get(username="alice")
    ClusterAccount.objects.get_or_create(user=alice, defaults={"unix_username": "sy-alice"})


@pytest.fixture
def storage_root(site) -> Path:
    """The demo site's storage areas' fresh folder of this test's (the `site` fixture's),
    with alice's folders made as a worker makes them when she first opens Files. Request it
    before a worker starts."""
    from django.contrib.auth.models import User

    from scheduling.engine.storage import prepare_user

    prepare_user(User.objects.get(username="alice").pk)
    return site


@pytest.fixture
def purge_broker():
    from config.celery import app

    def purge() -> None:
        # What this process committed is published by its publisher thread: sent first, so
        # the purge takes it too (scheduling/outbox.py).
        assert PUBLISHER.flush(10), "the publisher thread did not send in time"
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge(app.conf.task_default_queue)

    purge()
    return purge


@pytest.fixture
def start_worker(local_root, tmp_path, purge_broker) -> Iterator[Callable[..., subprocess.Popen]]:
    """Start `celery worker -B` against this test's database, broker and local root."""
    procs: list[subprocess.Popen] = []

    def start(
        *,
        sweep_seconds: int = 15,
        grace_seconds: int = 10,
        extra_env: dict[str, str] | None = None,
        hostname: str | None = None,
    ) -> subprocess.Popen:
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "SWITCHYARD_LOCAL_ROOT": str(local_root),
            "SWITCHYARD_POLL_MS": "200",
            "SWITCHYARD_SWEEP_SECONDS": str(sweep_seconds),
            "SWITCHYARD_PENDING_GRACE_SECONDS": str(grace_seconds),
            "SWITCHYARD_VAR_DIR": str(settings.VAR_DIR),
            **(extra_env or {}),
        }
        log = open(tmp_path / f"worker-{len(procs)}.log", "w")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            worker_argv(
                beat_schedule=tmp_path / f"beat-{len(procs)}",
                loglevel="INFO",
                quiet=True,
                hostname=hostname,
            ),
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc.log_path = log.name  # type: ignore[attr-defined]
        procs.append(proc)
        return proc

    yield start
    stop_workers(procs)


def stop_workers(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to each main process alone: it stops its pool in ~2 s (signalling the whole
    group kills the pool children under it and its shutdown then takes ~15 s). All are told
    at once, so that they stop side by side."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        os.kill(proc.pid, signal.SIGTERM)
    for proc in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=15)
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # anything left in its session
        proc.wait()


def stop_worker(proc: subprocess.Popen) -> None:
    stop_workers([proc])


def worker_log(proc: subprocess.Popen) -> str:
    return Path(proc.log_path).read_text()[-4000:]  # type: ignore[attr-defined]
