"""A real Prometheus (Debian's package) scrapes a running portal, and a submission made to
that portal is read back through Prometheus's query API (docs/operations.md, "Metrics").

The portal is started as a deployment starts it (`manage.py serve web`: gunicorn with two
processes sharing their samples through the web role's metrics folder); Prometheus runs on a
free port with a generated configuration and a folder of its own, never as the package's
service. Without `prometheus` the test skips here and fails in CI.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterator

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


@pytest.fixture
def portal(site, tmp_path) -> Iterator[str]:
    """`manage.py serve web` on a free port, on this test's database; its URL."""
    var = tmp_path / "var"
    var.mkdir()
    (var / "secret-key").write_text("prometheus-test-" + "k" * 40)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "DATABASE_URL": database_url(),
        "SWITCHYARD_VAR_DIR": str(var),
        "DJANGO_DEBUG": "1",
        "SWITCHYARD_METRICS": "1",
    }
    argv = [sys.executable, "manage.py", "serve", "web", "--addr", f"127.0.0.1:{port}"]
    log = tmp_path / "web.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*argv, "--workers", "2"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: proc.poll() is not None or _get(f"{url}/metrics")[0] == 200,
            timeout=60,
            what="the portal's /metrics",
        )
        assert proc.poll() is None, log.read_text()[-3000:]
        yield url
    finally:
        _stop(proc)


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


def test_prometheus_reads_back_a_submission_made_to_the_portal(portal, prometheus):
    token, _ = issue_token(User.objects.get(username="alice"))
    body = json.dumps(descriptor(name="scraped")).encode()
    request = urllib.request.Request(
        f"{portal}/api/v1/tasks/",
        data=body,
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 201
        created = json.loads(answer.read())
    labels = f'type="{created["type"]}",queue="{created["queue"]}"'

    def submitted() -> float:
        found = query(prometheus, f"switchyard_tasks_submitted_total{{{labels}}}")
        return sum(float(series["value"][1]) for series in found)

    assert wait_for(lambda: submitted() >= 1, timeout=30, what="the submission in Prometheus")
    assert submitted() == 1
    [up] = query(prometheus, 'up{job="switchyard"}')
    assert up["value"][1] == "1"
    # What the scrape reads from the database arrives too: the task waits in its queue.
    waiting = query(prometheus, f'switchyard_tasks{{queue="{created["queue"]}",state="waiting"}}')
    assert sum(float(series["value"][1]) for series in waiting) == 1
