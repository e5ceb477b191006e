from __future__ import annotations

import contextlib
import json
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from scheduling.selectors import site_view_invalidate

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def worker(django_capture_on_commit_callbacks):
    """`with worker():` runs the messages the block publishes on commit at once, in this
    process, as a worker would take them (Celery eager, errors raised)."""
    from config.celery import app

    @contextlib.contextmanager
    def run() -> Iterator[None]:
        saved = app.conf.task_always_eager, app.conf.task_eager_propagates
        app.conf.task_always_eager = app.conf.task_eager_propagates = True
        try:
            with django_capture_on_commit_callbacks(execute=True):
                yield
        finally:
            app.conf.task_always_eager, app.conf.task_eager_propagates = saved

    return run


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.fixture
def postgres_only():
    """For what only PostgreSQL does (real row locks between connections, multi-statement
    queries, COPY): skipped on another database here, a failure in CI, which runs it."""
    from django.db import connection

    if connection.vendor == "postgresql":
        return
    if in_ci():
        pytest.fail(f"CI must run this on PostgreSQL, not {connection.vendor}")
    pytest.skip(f"needs PostgreSQL, not {connection.vendor} (CI runs it)")


def make_job_root() -> Path:
    """A fresh local-backend root that the jobs' own accounts can pass through.

    pytest's tmp dirs are private to the user running the tests (0700), and a job's sandbox
    is set up by the job's own, other account: it must be able to reach its work folder
    (docs/security.md). So roots live under the test var dir, which the settings make 0711.
    """
    from django.conf import settings

    base = Path(settings.VAR_DIR) / "job-roots"
    base.mkdir(exist_ok=True)
    base.chmod(0o711)
    root = base / uuid.uuid4().hex[:12]
    root.mkdir()
    root.chmod(0o711)
    return root


def remove_job_root(root: Path) -> None:
    from scheduling.backends.local.jobstore import remove_tree
    from scheduling.backends.local.launch import stop_launcher

    # A launcher would leave by itself once its socket is gone, but only seconds later.
    for run in (root / "run", *root.glob("*/run")):
        stop_launcher(str(run.parent))
    for jobs in (root / "jobs", *root.glob("*/jobs")):
        _stop_jobs(jobs)
    remove_tree(str(root))


def _stop_jobs(jobs: Path) -> None:
    """Kill what each job under `jobs` still runs, and its supervisor: a live sandbox (a warm
    one a test's worker started, say) waits for work until it is stopped, and would outlive
    the test by the rest of the run, its supervisor polling all the while."""
    from scheduling.backends.local.jobstore import JobStore
    from scheduling.backends.local.launch import signal_child
    from scheduling.backends.local.shim import proc_start_time

    if not jobs.is_dir():
        return
    store = JobStore(str(jobs.parent))
    for folder in jobs.iterdir():
        # Best effort, as a cleanup is: a job half-written or already gone has nothing to stop.
        with contextlib.suppress(OSError, ValueError):
            signal_child(store.read_state(folder.name) or {}, signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError):
            pid, start = map(int, (folder / "shim.pid").read_text().split())
            if proc_start_time(pid) == start:
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def job_root() -> Iterator[Path]:
    root = make_job_root()
    yield root
    remove_job_root(root)


@pytest.fixture(autouse=True)
def _backends(settings):
    """Every test gets a fresh local-backend root and the in-memory fake backend."""
    root = make_job_root()
    # Seeding hashes five demo passwords per test; the real hasher makes that seconds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # The demo's operators log in with their password alone (CI runs production settings,
    # where they must give a code); tests of two-factor ask for it themselves.
    settings.SWITCHYARD_2FA_REQUIRED_ROLES = []
    # A cache of the test's own: request-rate throttles count there.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": uuid.uuid4().hex,
        }
    }
    settings.COMPUTE_BACKENDS = {
        "local": {
            "BACKEND": "scheduling.backends.local.LocalBackend",
            "RUNS_ON_THIS_HOST": True,
            "OPTIONS": {"root": str(root), "bwrap": "bwrap"},
        },
        "fake": {"BACKEND": "scheduling.backends.fake.FakeBackend", "OPTIONS": {}},
    }
    site_view_invalidate()
    yield
    site_view_invalidate()
    remove_job_root(root)


@pytest.fixture
def site(db):
    """The default site with demo accounts; pools run on the fake backend."""
    call_command("seed_demo", backend="fake", quiet=True)
    no_lease_schedules()
    site_view_invalidate()


@pytest.fixture
def cli_portal(site, live_server, monkeypatch, tmp_path) -> str:
    """A live portal on the demo site, and the command-line client (and the Python client)
    pointed at it as alice, with a token and no config file of its own; its URL."""
    from django.contrib.auth.models import User

    from portal.auth import issue_token

    token, _ = issue_token(User.objects.get(username="alice"))
    monkeypatch.setenv("SWITCHYARD_URL", live_server.url)
    monkeypatch.setenv("SWITCHYARD_TOKEN", token)
    monkeypatch.setenv("SWITCHYARD_CONFIG", str(tmp_path / "none.json"))
    return live_server.url


def move_storage_areas(root: Path) -> None:
    """Point the demo site's storage areas below `root`, so each test has folders of its own."""
    from django.conf import settings

    from scheduling.models import StorageArea

    demo = str(settings.SWITCHYARD_DEMO_STORAGE_DIR)
    for area in StorageArea.objects.all():
        area.path = str(root) + area.path.removeprefix(demo)
        area.save()
    site_view_invalidate()


def no_lease_schedules() -> None:
    """The default site lends inference nodes to training every night: tests must not depend on the
    hour they run at. Tests of the schedule switch it on themselves."""
    from scheduling.models import LeaseSchedule

    LeaseSchedule.objects.update(enabled=False)


@pytest.fixture
def researcher(site):
    from django.contrib.auth.models import User

    return User.objects.get(username="alice")  # member of materials and climate


@pytest.fixture
def outsider(site):
    from django.contrib.auth.models import User

    return User.objects.get(username="bob")  # member of genomics only


@pytest.fixture
def api(researcher) -> APIClient:
    client = APIClient()
    client.force_authenticate(researcher)
    return client


@pytest.fixture
def outsider_api(outsider) -> APIClient:
    client = APIClient()
    client.force_authenticate(outsider)
    return client


@pytest.fixture
def browser(researcher) -> Client:
    """Django's test client, logged in as the researcher (for the pages)."""
    client = Client()
    client.force_login(researcher)
    return client


@pytest.fixture
def outsider_browser(outsider) -> Client:
    client = Client()
    client.force_login(outsider)
    return client


def descriptor(**overrides) -> dict:
    """A small valid task descriptor; keyword arguments replace or add top-level fields."""
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": "t1",
        "project": "materials",
        "resources": {"cpus": 1, "memory": "1Gi"},
        "walltime": "10m",
        "command": ["true"],
    }
    doc.update(overrides)
    return {k: v for k, v in doc.items() if v is not None}


def submit(client: APIClient, doc: dict | str, content_type: str = "application/json"):
    body = doc if isinstance(doc, str | bytes) else json.dumps(doc)
    return client.post("/api/v1/tasks/", data=body, content_type=content_type)
