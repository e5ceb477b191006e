"""Through the real web server (gunicorn, config/runtime/serve.py): the admin console answers
only allowed addresses, a forwarded one only from the trusted proxy; the refusal is logged as
a JSON line under the request's id (docs/security.md, "Address allow-lists")."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import time

import pytest

from config.runtime.serve import web_argv
from tests.conftest import ROOT
from tests.integration.conftest import database_url
from tests.integration.test_client_address import _free_port

pytestmark = pytest.mark.django_db(transaction=True)

PROXY = "127.0.0.1"  # the front, trusted
OTHER = "127.0.0.2"  # another peer on this host: not trusted, its X-Forwarded-For not read


@pytest.fixture
def portal(tmp_path, monkeypatch):
    var = tmp_path / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "DATABASE_URL": database_url(),
        "SWITCHYARD_VAR_DIR": str(var),
        "DJANGO_SECRET_KEY": "admin-allow-" + "k" * 40,
        "SWITCHYARD_TRUSTED_PROXIES": PROXY,
        "SWITCHYARD_ADMIN_ALLOW": "192.0.2.0/24",
        "SWITCHYARD_LOG_FORMAT": "json",
    }
    monkeypatch.setenv("SWITCHYARD_TRUSTED_PROXIES", PROXY)  # gunicorn's trust: the same list
    port = _free_port()
    log = tmp_path / "web.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            web_argv(f"127.0.0.1:{port}", workers=1), env=env, cwd=ROOT, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 60
        while _get(port, source=PROXY, forwarded="192.0.2.9", path="/login/") is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(log.read_text()[-3000:])
            time.sleep(0.2)
        yield port, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _get(port: int, *, source: str, forwarded: str | None, path: str = "/admin/login/"):
    """(status, X-Request-ID, body) of a GET from `source`, or None while nothing listens."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.getheader("X-Request-ID"), response.read().decode()
    except OSError:
        return None
    finally:
        conn.close()


def test_the_admin_console_answers_only_allowed_addresses(portal):
    port, log = portal
    status, _, _ = _get(port, source=PROXY, forwarded="192.0.2.40")
    assert status == 200
    status, request_id, body = _get(port, source=PROXY, forwarded="198.51.100.7")
    assert status == 403 and "198.51.100.7" in body and "not allowed" in body
    # A peer that is not the proxy cannot name an allowed address for itself.
    status, _, body = _get(port, source=OTHER, forwarded="192.0.2.40")
    assert status == 403 and OTHER in body
    # The rest of the portal stays open.
    assert _get(port, source=OTHER, forwarded=None, path="/login/")[0] == 200

    def refusal() -> list[dict]:
        lines = [json.loads(t) for t in log.read_text().splitlines() if t.startswith("{")]
        return [line for line in lines if line.get("request_id") == request_id]

    deadline = time.monotonic() + 10
    while not refusal() and time.monotonic() < deadline:
        time.sleep(0.1)
    messages = {line["logger"]: line["message"] for line in refusal()}
    assert "198.51.100.7" in messages["config.allowlist"], messages
    assert messages["django.request"] == "Forbidden: /admin/login/"
