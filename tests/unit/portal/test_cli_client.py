"""The command line's own behaviour, without a portal: what it does with odd answers, where
it keeps the token. (tests/integration/test_cli.py runs it against a live portal.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from switchyard_cli import cli, client

CLIENTS = Path(__file__).resolve().parents[3] / "clients"


def test_the_command_line_is_a_package_of_its_own_that_loads_nothing_of_the_portal():
    declared = tomllib.loads((CLIENTS / "pyproject.toml").read_text())["project"]
    assert [d.split("==")[0] for d in declared["dependencies"]] == ["PyYAML"]
    # From `/`, in isolated mode: only what the installed package itself imports.
    code = (
        "import sys, switchyard_cli; print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'django', 'rest_framework', 'celery', 'portal', 'scheduling', 'accounting'}))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-c", code], cwd="/", capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


class _Html(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - the standard library's name
        body = b"<html>a login page</html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_an_answer_that_is_not_the_portals_is_exit_6_not_a_traceback(tmp_path, monkeypatch, capsys):
    server = HTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("SWITCHYARD_CONFIG", str(tmp_path / "c.json"))
        monkeypatch.setenv("SWITCHYARD_TOKEN", "t")
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert cli.main(["--url", url, "status"]) == client.UNREACHABLE
        assert "not JSON" in capsys.readouterr().err
    finally:
        server.shutdown()


class _Elsewhere(BaseHTTPRequestHandler):
    """Sends every request on to another address, and notes the headers it was sent."""

    seen: list[dict[str, str]] = []
    target = ""

    def do_GET(self):  # noqa: N802 - the standard library's name
        type(self).seen.append(dict(self.headers))
        if type(self).target:
            self.send_response(302)
            self.send_header("Location", type(self).target + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_redirect_never_carries_the_token_on():
    """urllib keeps a request's headers on a redirect, to whatever host it names: the token is
    sent only to the address the client was given."""
    there = type("There", (_Elsewhere,), {"seen": [], "target": ""})
    here = type("Here", (_Elsewhere,), {"seen": []})
    servers = [HTTPServer(("127.0.0.1", 0), there), HTTPServer(("127.0.0.1", 0), here)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        here.target = f"http://127.0.0.1:{servers[0].server_address[1]}"
        api = client.Client(f"http://127.0.0.1:{servers[1].server_address[1]}", "secret-token")
        api.call("GET", "tasks/")
        assert here.seen[0]["Authorization"] == "Token secret-token"
        assert there.seen and "Authorization" not in there.seen[0]
    finally:
        for server in servers:
            server.shutdown()


def test_the_token_file_is_private_and_replaces_no_symlink(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHYARD_CONFIG", str(tmp_path / "dir" / "config.json"))
    (tmp_path / "dir").mkdir()
    target = tmp_path / "elsewhere"
    (tmp_path / "dir" / "config.json.tmp").symlink_to(target)  # the old fixed name
    path = client.save_config({"token": "secret"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not target.exists()
    assert json.loads(path.read_text()) == {"token": "secret"}


def _planted(folder, monkeypatch):
    """A config another account could have planted: it would send the password to its URL."""
    folder.mkdir(exist_ok=True)
    config = folder / "config.json"
    config.write_text(json.dumps({"url": "http://127.0.0.1:9", "token": "planted"}))
    config.chmod(0o600)
    monkeypatch.setenv("SWITCHYARD_CONFIG", str(config))
    monkeypatch.delenv("SWITCHYARD_TOKEN", raising=False)
    monkeypatch.delenv("SWITCHYARD_URL", raising=False)
    return config


def test_it_refuses_a_config_folder_others_can_write_and_says_what_to_run(
    tmp_path, monkeypatch, capsys
):
    config = _planted(tmp_path / "shared", monkeypatch)
    config.parent.chmod(0o777)
    assert cli.main(["status"]) == client.BAD_INPUT
    err = capsys.readouterr().err
    assert "others may write" in err and f"chmod 700 {config.parent}" in err
    assert cli.main(["login", "--password-stdin"]) == client.BAD_INPUT  # no password asked
    config.parent.chmod(0o700)
    with pytest.raises(client.CliError, match="cannot reach"):
        client.client(cli.parser().parse_args(["status"])).json("GET", "tasks/")


def test_it_refuses_a_token_file_others_can_read_or_write(tmp_path, monkeypatch, capsys):
    config = _planted(tmp_path / "mine", monkeypatch)
    config.chmod(0o646)
    assert cli.main(["status"]) == client.BAD_INPUT
    assert f"chmod 600 {config}" in capsys.readouterr().err
    with pytest.raises(client.CliError, match="chmod 600"):
        client.save_config({"token": "new"})
    assert "planted" in config.read_text()


@pytest.mark.skipif(os.geteuid() != 0, reason="making a folder another account owns needs root")
def test_it_refuses_a_config_folder_another_account_owns(tmp_path, monkeypatch, capsys):
    config = _planted(tmp_path / "theirs", monkeypatch)
    os.chown(config.parent, 65534, 65534)
    assert cli.main(["status"]) == client.BAD_INPUT
    assert "belongs to another account" in capsys.readouterr().err
