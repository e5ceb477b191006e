"""Egress as a live sandbox gets it: the agent (session/agent.py) in the job's usual sandbox,
started with `--egress-socket`, runs its forwarder, and the session's commands reach the
listed host through the session's tinyproxy and nothing else (docs/sandbox-network.md).
Without egress the same commands have no network at all."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scheduling.backends.base import ExecRequest
from scheduling.backends.jobnet import host_addresses
from scheduling.backends.sandbox import sandbox_argv
from scheduling.backends.session import box, egress, proxylog, wire
from tests.conftest import in_ci
from tests.servers import need
from tests.unit.scheduling.egress.helpers import GREETING, http_server, run_as, session_folder
from tests.unit.scheduling.sessions.helpers import wait_answers

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("the proxy and the sandbox run as switchyard-job: needs root")

AGENT = str(Path(box.__file__).with_name("agent.py"))

FETCH = """
import os, sys, urllib.error, urllib.request
print("proxy", os.environ.get("HTTP_PROXY"))
for url in sys.argv[1:]:
    try:
        print(url, urllib.request.urlopen(url, timeout=10).read().decode()[:40])
    except urllib.error.HTTPError as exc:
        print(url, exc.code)
    except OSError as exc:
        print(url, "error", getattr(exc, "reason", exc))
"""


@pytest.fixture
def start_session(job_root) -> Iterator[Callable[..., tuple[str, Path]]]:
    """Start live sandboxes (agent in bubblewrap, as the job's account), with the session's
    proxy when given an allow-list; (agent socket, session folder)."""
    need("tinyproxy", egress.find("tinyproxy"))
    started: list[subprocess.Popen[bytes]] = []
    proxies: list[tuple[int, int, int]] = []

    def _start(allow: list[str], name: str = "s") -> tuple[str, Path]:
        (job_root / name).mkdir(mode=0o711)
        (job_root / name).chmod(0o711)
        folder = session_folder(job_root / name)
        extra = box.mounts(AGENT, home_bytes=64 << 20)
        if allow:
            sock = str(folder / "egress.sock")
            proxies.append(egress.start(str(folder), allow, socket_path=sock, run_as=run_as()))
            extra = box.mounts(
                AGENT,
                home_bytes=64 << 20,
                forward_file=str(folder / "forward.py"),
                egress_socket=sock,
            )
        path = str(folder / box.SOCKET_NAME)
        listener = box.listen(path)
        argv = sandbox_argv(
            "bwrap", writable=[], hide="/srv", chdir="/", tmp_bytes=64 << 20, extra=extra
        )
        fd = listener.fileno()
        command = box.agent_argv(60, egress=bool(allow), listen_fd=fd, python="/usr/bin/python3")
        process = subprocess.Popen(
            [*argv, *command],
            pass_fds=[fd],
            user=run_as()[0],
            group=run_as()[1],
            extra_groups=[],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        listener.close()
        started.append(process)
        wait_answers(path, process)
        return path, folder

    yield _start
    for process in started:
        process.kill()
        process.wait()
    for handle in proxies:
        egress.stop(handle)


def fetch(path: str, *urls: str) -> list[str]:
    result = wire.exec_in(path, ExecRequest(argv=("python3", "-I", "-c", FETCH, *urls)))
    assert result.exit_code == 0, result.stderr
    return result.stdout.decode().splitlines()


def test_a_sessions_commands_reach_the_listed_host_through_its_proxy_only(start_session):
    with http_server(GREETING) as allowed, http_server("other") as other:
        path, folder = start_session([f"localhost:{allowed}"])
        outside = next((a for a in host_addresses() if not a.startswith("127.")), "10.0.2.2")
        lines = fetch(
            path,
            f"http://localhost:{allowed}/from-the-agent",
            f"http://localhost:{other}/",
            f"http://127.0.0.1:{allowed}/",
            f"http://{outside}:{allowed}/",
        )
        assert lines[0] == "proxy http://127.0.0.1:3128"
        assert lines[1].startswith(f"http://localhost:{allowed}/from-the-agent {GREETING} ")
        assert lines[2:] == [
            f"http://localhost:{other}/ 403",
            f"http://127.0.0.1:{allowed}/ 403",
            f"http://{outside}:{allowed}/ 403",
        ]
        # Around the proxy: the namespace has no route out.
        direct = wire.exec_in(
            path,
            ExecRequest(
                argv=(
                    "python3",
                    "-I",
                    "-c",
                    f"import socket; socket.create_connection(({outside!r}, {allowed}), 5)",
                )
            ),
        )
        assert direct.exit_code == 1 and b"Network is unreachable" in direct.stderr
    records = proxylog.read(str(folder / egress.LOG_NAME))
    assert [(r["target"], r["decision"]) for r in records] == [
        (f"localhost:{allowed}", proxylog.ALLOWED),
        (f"localhost:{other}", proxylog.REFUSED),
        (f"127.0.0.1:{allowed}", proxylog.REFUSED),
        (f"{outside}:{allowed}", proxylog.REFUSED),
    ]


def test_a_session_without_egress_has_no_network_and_no_proxy(start_session):
    with http_server(GREETING) as port:
        path, _ = start_session([])
        lines = fetch(path, f"http://localhost:{port}/")
    assert lines[0] == "proxy None"
    assert lines[1].startswith(f"http://localhost:{port}/ error") and "refused" in lines[1]
