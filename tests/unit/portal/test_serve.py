"""The production web server (config/runtime/serve.py): gunicorn serves the portal and its static
files (WhiteNoise: hashed names, compressed, cached for a year), as `manage.py up` starts it."""

from __future__ import annotations

import http.client
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from config.runtime.serve import STATIC_MANIFEST_ENV, web_argv

ROOT = Path(__file__).resolve().parents[3]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str, **headers: str) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.body = response.read()
    conn.close()
    return response


@pytest.fixture
def served(tmp_path):
    var = tmp_path / "var"
    var.mkdir()
    (var / "secret-key").write_text("test-" + "x" * 50)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")} | {
        "SWITCHYARD_VAR_DIR": str(var),
        STATIC_MANIFEST_ENV: "1",
        "DJANGO_DEBUG": "0",
    }
    manage = [sys.executable, str(ROOT / "manage.py")]
    subprocess.run([*manage, "collectstatic", "--noinput", "-v0"], env=env, cwd=ROOT, check=True)
    port = _free_port()
    proc = subprocess.Popen(
        web_argv(f"127.0.0.1:{port}", workers=2),
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                _get(port, "/login/")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(proc.stdout.read().decode()[-3000:]) from None
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_gunicorn_serves_the_pages_and_hashed_static_files(served):
    page = _get(served, "/login/")
    assert page.status == 200
    assert page.getheader("Server") == "gunicorn"
    html = page.body.decode()
    css = next(
        part.split('"')[0] for part in html.split('href="')[1:] if part.startswith("/static/")
    )
    assert css.count(".") >= 2, f"{css}: not a content-hashed name"
    static = _get(served, css, **{"Accept-Encoding": "gzip"})
    assert static.status == 200
    assert "immutable" in static.getheader("Cache-Control")
    assert static.getheader("Content-Encoding") == "gzip"
    assert _get(served, "/static/no-such-file.css").status == 404


def test_the_web_command_line_is_gunicorn_with_threads():
    argv = web_argv("127.0.0.1:9", workers=3, threads=2, python="py")
    assert argv[:4] == ["py", "-m", "gunicorn", "config.wsgi:application"]
    assert argv[argv.index("--workers") + 1] == "3"
    assert argv[argv.index("--worker-class") + 1] == "gthread"
    assert argv[argv.index("--threads") + 1] == "2"
