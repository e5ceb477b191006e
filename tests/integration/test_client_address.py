"""Through the real web server (config/runtime/serve.py's gunicorn): a forwarded address counts only
from a trusted proxy, so a forged X-Forwarded-For neither escapes the throttle nor locks out
another client of the proxy."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import time

import pytest

from config.runtime.serve import web_argv
from tests.conftest import ROOT
from tests.integration.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)

PROXY = "127.0.0.1"  # a front on the portal's host, trusted
JOB = "127.0.0.2"  # another address of the same host, as a job there might use: not trusted


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def portal(tmp_path, monkeypatch):
    var = tmp_path / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"} | {
        "DATABASE_URL": database_url(),
        "SWITCHYARD_VAR_DIR": str(var),
        "DJANGO_SECRET_KEY": "client-address-" + "k" * 40,
        "SWITCHYARD_TRUSTED_PROXIES": PROXY,
    }
    port = _free_port()
    monkeypatch.setenv("SWITCHYARD_TRUSTED_PROXIES", PROXY)  # gunicorn's trust: the same list
    argv = web_argv(f"127.0.0.1:{port}", workers=1)
    assert argv[argv.index("--forwarded-allow-ips") + 1] == f"{PROXY}/32"
    proc = subprocess.Popen(
        argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.stdout.read().decode()[-3000:]) from None
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def token_request(port: int, *, source: str, forwarded: str | None, body: dict) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    headers = {"Content-Type": "application/json"}
    if forwarded is not None:
        headers["X-Forwarded-For"] = forwarded
    conn.request("POST", "/api/v1/auth/token/", json.dumps(body), headers)
    status = conn.getresponse().status
    conn.close()
    return status


def test_gunicorn_believes_forwarded_addresses_only_from_the_trusted_proxy(portal, settings):
    # A peer that is not the proxy names a new address each time: still one client, throttled
    # at the site's rate (30 a minute). No password, so nothing is hashed.
    answers = [
        token_request(portal, source=JOB, forwarded=f"203.0.113.{n}", body={"username": "x"})
        for n in range(35)
    ]
    assert answers.count(400) == 30 and answers[30:] == [429] * 5
    # Through the proxy, wrong passwords lock out the client the proxy names, and no other.
    wrong = {"username": "carol", "password": "guess"}
    statuses = [
        token_request(portal, source=PROXY, forwarded="198.51.100.7", body=wrong)
        for _ in range(settings.AXES_FAILURE_LIMIT + 1)
    ]
    assert statuses[-2:] == [429, 429]
    assert token_request(portal, source=PROXY, forwarded="198.51.100.8", body=wrong) == 400
