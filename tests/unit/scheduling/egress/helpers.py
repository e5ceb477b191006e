"""What the egress tests share: test HTTP servers on this host, a session's proxy as the job's
account, and a real bubblewrap sandbox (empty network namespace) with forward.py in it.

The sandbox here is bubblewrap with the same namespaces and read-only system as every job's
(scheduling/backends/sandbox.py), run by switchyard-job, with the egress socket and forward.py
bound in at the paths the agent uses. Starting it as another account needs root.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scheduling.backends.sandbox import SYSTEM_BINDS
from scheduling.backends.session import forward

ACCOUNT = "switchyard-job"
IN_SANDBOX = "/run/switchyard"
GREETING = "hello-through-the-proxy"


def run_as() -> tuple[int, int]:
    entry = pwd.getpwnam(ACCOUNT)
    return entry.pw_uid, entry.pw_gid


class _Answer(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        seen = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}
        body = (f"{self.server.greeting} " + json.dumps(seen)).encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def http_server(greeting: str) -> Iterator[int]:
    """An HTTP server on every address of this host (so that a request the proxy let through
    by any name or address would be answered); yields its port."""
    server = ThreadingHTTPServer(("0.0.0.0", 0), _Answer)
    server.greeting = greeting  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def session_folder(root: Path) -> Path:
    """A session's folder the job's account can read (the proxy's configuration is there),
    with forward.py copied in as the trusted side ships it."""
    folder = root / "session"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    shutil.copy(forward.__file__, folder / "forward.py")
    (folder / "forward.py").chmod(0o644)
    return folder


def in_sandbox(
    folder: Path,
    script: str,
    *args: str,
    sockets: dict[str, int],
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess:
    """Run `python3 -c script args` in a bubblewrap sandbox as ACCOUNT, with no network but
    its own loopback, each socket of `sockets` ({name in folder: port}) bound in at
    /run/switchyard/<name> and forwarded to 127.0.0.1:<port> inside by forward.py."""
    bwrap = shutil.which("bwrap")
    assert bwrap, "bubblewrap is installed by make system-deps"
    binds = ["--ro-bind", str(folder / "forward.py"), f"{IN_SANDBOX}/forward.py"]
    forwards: list[str] = []
    for name, port in sockets.items():
        binds += ["--ro-bind", str(folder / name), f"{IN_SANDBOX}/{name}"]
        forwards += ["--to", f"{port}={IN_SANDBOX}/{name}"]
    setenv = [a for k, v in (env or {}).items() for a in ("--setenv", k, v)]
    argv = [
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        *SYSTEM_BINDS,
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--tmpfs",
        "/run",
        *binds,
        "--remount-ro",
        "/",
        "--chdir",
        "/tmp",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        *setenv,
        "--",
        "/usr/bin/python3",
        "-I",
        "-S",
        f"{IN_SANDBOX}/forward.py",
        *forwards,
        "--",
        "/usr/bin/python3",
        "-I",
        "-c",
        script,
        *args,
    ]
    uid, gid = run_as()
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        user=uid,
        group=gid,
        extra_groups=[],
        cwd="/",
        env={"PATH": "/usr/bin:/bin", "LANG": "C"},
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
