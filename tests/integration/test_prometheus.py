"""A real Prometheus (Debian's package) scrapes a running portal, and a submission made to
that portal is read back through Prometheus's query API (docs/operations.md, "Metrics").

The portal is started as a deployment starts it (`manage.py serve web`: gunicorn with two
processes sharing their samples through the web role's metrics folder; `serve worker` and
`serve beat` beside it, each counting in a folder of its own that the web server's /metrics
merges); Prometheus runs on a free port with a generated configuration and a folder of its
own, never as the package's service. Without `prometheus` the tests skip here and fail in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from portal.auth import issue_token
from tests.conftest import ROOT, descriptor
from tests.integration.conftest import database_url, wait_for
from tests.servers import free_port, need

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Roles:
    """Roles of one deployment started as `manage.py serve ROLE` starts them, sharing this
    test's database, a var folder (its filesystem broker and metrics folders) and the
    local backend's root."""

    def __init__(self, tmp_path: Path, local_root: Path) -> None:
        self.tmp_path, self.var = tmp_path, tmp_path / "var"
        self.var.mkdir()
        (self.var / "secret-key").write_text("prometheus-test-" + "k" * 40)
        self.env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
            "DATABASE_URL": database_url(),
            "SWITCHYARD_VAR_DIR": str(self.var),
            "SWITCHYARD_LOCAL_ROOT": str(local_root),
            "SWITCHYARD_POLL_MS": "200",
            "DJANGO_DEBUG": "1",
            "SWITCHYARD_METRICS": "1",
        }
        self.procs: list[subprocess.Popen] = []

    def start(self, role: str, *args: str) -> subprocess.Popen:
        log = self.tmp_path / f"{role}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, "manage.py", "serve", role, *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        proc.log_path = log  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)


@pytest.fixture
def roles(site, local_root, tmp_path) -> Iterator[Roles]:
    started = Roles(tmp_path, local_root)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def portal(roles) -> str:
    """`manage.py serve web` (two gunicorn processes) on a free port; its URL."""
    port = free_port()
    proc = roles.start("web", "--addr", f"127.0.0.1:{port}", "--workers", "2")
    url = f"http://127.0.0.1:{port}"
    wait_for(
        lambda: proc.poll() is not None or _get(f"{url}/metrics")[0] == 200,
        timeout=60,
        what="the portal's /metrics",
    )
    assert proc.poll() is None, proc.log_path.read_text()[-3000:]  # type: ignore[attr-defined]
    return url


@pytest.fixture
def prometheus(portal, tmp_path) -> Iterator[str]:
    """Prometheus scraping `portal` every second; its URL."""
    binary = shutil.which("prometheus")
    need("Debian's prometheus (make test installs it)", binary)
    target = urllib.parse.urlsplit(portal).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(  # YAML is a superset of JSON
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "switchyard", "static_configs": [{"targets": [target]}]}
                ],
            }
        )
    )
    port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=out,
            stderr=out,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: proc.poll() is not None or _get(f"{url}/-/ready")[0] == 200,
            timeout=60,
            what="Prometheus to be ready",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        yield url
    finally:
        _stop(proc)


def query(prometheus: str, promql: str) -> list[dict]:
    status, body = _get(f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert status == 200, body[:500]
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    return answer["data"]["result"]


def submit_one(portal: str) -> dict:
    token, _ = issue_token(User.objects.get(username="alice"))
    request = urllib.request.Request(
        f"{portal}/api/v1/tasks/",
        data=json.dumps(descriptor(name="scraped")).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 201
        return json.loads(answer.read())


def total(prometheus: str, promql: str) -> float:
    return sum(float(series["value"][1]) for series in query(prometheus, promql))


def test_prometheus_reads_back_a_submission_made_to_the_portal(portal, prometheus):
    created = submit_one(portal)
    labels = f'type="{created["type"]}",queue="{created["queue"]}"'
    submitted = f"switchyard_tasks_submitted_total{{{labels}}}"
    assert wait_for(
        lambda: total(prometheus, submitted) >= 1, timeout=30, what="the submission in Prometheus"
    )
    assert total(prometheus, submitted) == 1
    [up] = query(prometheus, 'up{job="switchyard"}')
    assert up["value"][1] == "1"
    # What the scrape reads from the database arrives too: the task waits in its queue.
    assert total(prometheus, f'switchyard_tasks{{queue="{created["queue"]}",state="waiting"}}') == 1


def test_the_worker_and_the_beat_are_seen_through_the_web_servers_metrics(
    roles, portal, prometheus
):
    # Each role counts in its own folder; the web server's /metrics merges them.
    roles.start("worker", "--concurrency", "1", "--hostname", "metrics-test@%h")
    roles.start("beat")
    created = submit_one(portal)
    backend = f'backend="{created["backend"]}"'
    checks = {
        "the worker's heartbeat": "switchyard_worker_last_task_timestamp_seconds",
        "the beat's heartbeat": "switchyard_beat_last_tick_timestamp_seconds",
        "the dispatch latency": f"switchyard_dispatch_latency_seconds_count{{{backend}}}",
        "the backend's submit": (
            f'switchyard_backend_call_seconds_count{{{backend},operation="submit_many"}}'
        ),
    }
    for what, promql in checks.items():
        wait_for(lambda promql=promql: total(prometheus, promql) > 0, timeout=60, what=what)
    assert total(prometheus, checks["the dispatch latency"]) == 1
    now = time.time()
    assert now - 60 < total(prometheus, checks["the beat's heartbeat"]) <= now + 1
    folders = sorted(path.name.split("-")[0] for path in (roles.var / "metrics").iterdir())
    assert folders == ["beat", "web", "worker"]
