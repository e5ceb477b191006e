"""The command line's own behaviour, without a portal: what it does with odd answers, where
it keeps the token. (tests/integration/test_cli.py runs it against a live portal.)"""

from __future__ import annotations

import json
import stat
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from portal import cli


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
        assert cli.main(["--url", url, "status"]) == cli.UNREACHABLE
        assert "not JSON" in capsys.readouterr().err
    finally:
        server.shutdown()


def test_the_token_file_is_private_and_replaces_no_symlink(tmp_path, monkeypatch):
    monkeypatch.setenv("SWITCHYARD_CONFIG", str(tmp_path / "dir" / "config.json"))
    (tmp_path / "dir").mkdir()
    target = tmp_path / "elsewhere"
    (tmp_path / "dir" / "config.json.tmp").symlink_to(target)  # the old fixed name
    path = cli.save_config({"token": "secret"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and not target.exists()
    assert json.loads(path.read_text()) == {"token": "secret"}
