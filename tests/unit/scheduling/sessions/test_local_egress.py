"""A live sandbox on the local backend with an egress allow-list: its supervisor starts the
session's proxy before the sandbox, the sandbox reaches the listed host through it and nothing
else, and the proxy ends with the session (docs/sandbox-network.md)."""

from __future__ import annotations

import dataclasses
import os
import time

from scheduling.backends.base import ExecRequest, JobState
from scheduling.backends.session import egress, proxylog
from tests.servers import need
from tests.unit.scheduling.egress.helpers import GREETING, http_server
from tests.unit.scheduling.local_backend.helpers import finished, running, state_file
from tests.unit.scheduling.sessions.helpers import session

FETCH = """
import sys, urllib.error, urllib.request
for url in sys.argv[1:]:
    try:
        print(url, urllib.request.urlopen(url, timeout=10).read().decode()[:30])
    except urllib.error.HTTPError as exc:
        print(url, exc.code)
    except OSError as exc:
        print(url, "error")
"""


def with_egress(key: str, allow: list[str]):
    base = session(key)
    return dataclasses.replace(base, spec=dataclasses.replace(base.spec, egress=tuple(allow)))


def test_a_session_reaches_its_listed_host_through_its_own_proxy_only(make):
    need("tinyproxy", egress.find("tinyproxy"))
    backend = make()
    with http_server(GREETING) as allowed, http_server("other") as other:
        backend.submit(with_egress("out", [f"localhost:{allowed}"]))
        running(backend, "out")
        result = backend.exec_in(
            "out",
            ExecRequest(
                argv=(
                    "python3",
                    "-I",
                    "-c",
                    FETCH,
                    f"http://localhost:{allowed}/",
                    f"http://localhost:{other}/",
                )
            ),
        )
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith(f"http://localhost:{allowed}/ {GREETING}")
    assert lines[1:] == [f"http://localhost:{other}/ 403"]
    decisions = [(r["target"], r["decision"]) for r in backend.egress_audit("out")]
    assert decisions == [
        (f"localhost:{allowed}", proxylog.ALLOWED),
        (f"localhost:{other}", proxylog.REFUSED),
    ]
    folder = backend.store.path("out", "egress").encode()
    proxies = [pid for pid in _pids() if folder in _cmdline(pid)]  # tinyproxy -c <folder>/…
    assert proxies, "the session's proxy runs while the session does"
    backend.cancel("out")
    assert finished(backend, "out").state is JobState.CANCELLED
    end = time.monotonic() + 5
    while any(folder in _cmdline(pid) for pid in proxies) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(folder in _cmdline(pid) for pid in proxies), "the proxy ends with the session"
    assert state_file(backend, "out")["state"] == "cancelled"


def test_an_allow_list_that_is_not_one_fails_the_session_saying_why(make):
    backend = make()
    backend.submit(with_egress("bad", ["10.0.0.1:80"]))
    job = finished(backend, "bad")
    assert job.state is JobState.FAILED and "host:port" in job.reason


def _pids() -> list[int]:
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit()]


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_the_proxy_sees_no_other_sandbox_of_its_account(make):
    """tinyproxy parses what the sandbox sends and runs as the job's account, which the
    service account's sandboxes share: confined, it sees no process of the host (so no
    other sandbox's files through /proc/<pid>/root) and none of the account's /tmp."""
    need("tinyproxy", egress.find("tinyproxy"))
    backend = make()
    backend.submit(session("other"))
    running(backend, "other")
    secret = backend.exec_in(
        "other", ExecRequest(argv=("sh", "-c", "echo secret > s.txt; sleep 300 &"))
    )
    assert secret.exit_code == 0
    other = state_file(backend, "other")["sandbox_pid"]
    assert os.path.exists(f"/proc/{other}/root/home/sandbox/s.txt")  # from the host: yes
    backend.submit(with_egress("out", ["localhost:9"]))
    running(backend, "out")
    folder = backend.store.path("out", "egress").encode()
    tinyproxy = [
        pid
        for pid in _pids()
        if folder in _cmdline(pid) and _cmdline(pid).split(b"\0")[0].endswith(b"/tinyproxy")
    ]
    assert tinyproxy, "the session's proxy runs"
    assert os.readlink(f"/proc/{tinyproxy[0]}/ns/pid") != os.readlink("/proc/self/ns/pid")
    its_proc = f"/proc/{tinyproxy[0]}/root/proc"
    visible = [p for p in os.listdir(its_proc) if p.isdigit()]
    assert len(visible) < 5, visible  # its own namespace's: its init and itself
    assert str(other) not in visible
    assert os.listdir(f"/proc/{tinyproxy[0]}/root/tmp") == []
    backend.cancel("out")
    backend.cancel("other")
