"""A live sandbox's egress allow-list on the real Slurm (docs/sandbox-network.md,
docs/sandbox-slurm.md): the session's watcher, as the job's account on the node, starts the
session's tinyproxy before the sandbox, the one listed host answers through it and everything
else is refused and audited; the proxy ends with the session.

`.ci/run` starts the cluster; without it these tests fail in CI and skip elsewhere. One
session (each start is a job start).
"""

from __future__ import annotations

import socket

import pytest

from scheduling.backends.base import BackendError, ExecRequest
from scheduling.backends.jobnet import host_addresses
from scheduling.backends.session import egress, proxylog
from tests.integration.slurm.test_sandboxes import (
    processes_of,
    session_request,
    start_session,
    wait_gone,
)
from tests.servers import need
from tests.unit.scheduling.egress.helpers import GREETING, http_server

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

# Run in the sandbox: each argument a URL fetched through the proxy the environment names,
# `connect:host:port` a CONNECT asked of that proxy, or `direct:host:port` a connection
# made around it. One line each: the answer's status or body, or the error.
FETCH = """
import http.client, os, socket, sys, urllib.error, urllib.request
print("proxy", os.environ.get("HTTP_PROXY"))
for arg in sys.argv[1:]:
    kind, _, target = arg.partition(":")
    try:
        if kind == "connect":
            proxy = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
            proxy.request("CONNECT", target)
            print(arg, proxy.getresponse().status)
        elif kind == "direct":
            host, _, port = target.rpartition(":")
            socket.create_connection((host, int(port)), timeout=5).close()
            print(arg, "connected")
        else:
            print(arg, urllib.request.urlopen(arg, timeout=10).read().decode()[:40])
    except urllib.error.HTTPError as exc:
        print(arg, exc.code)
    except OSError as exc:
        print(arg, "error", type(exc).__name__)
"""


def test_the_allow_list_lets_one_host_through_the_sessions_proxy_and_refuses_the_rest(slurm):
    need("tinyproxy", egress.find("tinyproxy"))
    outside = next((a for a in host_addresses() if not a.startswith("127.")), "10.0.2.2")
    here = socket.gethostname()
    with http_server(GREETING) as allowed, http_server("other") as other:
        backend_id = start_session(slurm, egress=(f"localhost:{allowed}",))
        key = backend_id.partition(":")[2]
        try:
            asked = [
                f"http://localhost:{allowed}/listed",
                f"http://{here}:{allowed}/",  # another name of the same host
                f"http://127.0.0.1:{allowed}/",  # a raw IP
                f"http://{outside}:{allowed}/",
                f"http://localhost:{other}/",  # another port
                "http://localhost:6379/",  # Redis
                "connect:localhost:6379",
                "connect:localhost:5432",  # PostgreSQL
                f"connect:localhost:{allowed}",
                f"direct:127.0.0.1:{allowed}",  # around the proxy: the sandbox's own loopback
                f"direct:{outside}:6379",
            ]
            request = ExecRequest(argv=("python3", "-I", "-c", FETCH, *asked), timeout_s=60)
            result = slurm.exec_in(backend_id, request)
            assert result.exit_code == 0, result
            lines = result.stdout.decode().splitlines()
            assert lines[0] == "proxy http://127.0.0.1:3128"
            assert lines[1].startswith(f"{asked[0]} {GREETING} "), lines
            assert lines[2:] == [
                f"{asked[1]} 403",
                f"{asked[2]} 403",
                f"{asked[3]} 403",
                f"{asked[4]} 403",
                f"{asked[5]} 403",
                f"{asked[6]} 403",
                f"{asked[7]} 403",
                f"{asked[8]} 200",  # a tunnel to the listed pair (HTTPS's way)
                f"{asked[9]} error ConnectionRefusedError",
                f"{asked[10]} error OSError",  # Network is unreachable
            ], lines
            # The proxy runs as the job's account, never root, on the node (here: this host).
            proxies = [p for p in processes_of(key) if _name(p) == "tinyproxy"]
            assert len(proxies) == 1 and all(_uid(p) != 0 for p in proxies), proxies
        finally:
            slurm.cancel(backend_id)
        wait_gone(slurm, backend_id)  # the proxy and its keeper too: they carry the key

    # The audit, from the job's folder, after the session has ended.
    decided = [(r["method"], r["target"], r["decision"]) for r in slurm.egress_audit(backend_id)]
    assert decided == [
        ("GET", f"localhost:{allowed}", proxylog.ALLOWED),
        ("GET", f"{here}:{allowed}", proxylog.REFUSED),
        ("GET", f"127.0.0.1:{allowed}", proxylog.REFUSED),
        ("GET", f"{outside}:{allowed}", proxylog.REFUSED),
        ("GET", f"localhost:{other}", proxylog.REFUSED),
        ("GET", "localhost:6379", proxylog.REFUSED),
        ("CONNECT", "localhost:6379", proxylog.REFUSED),
        ("CONNECT", "localhost:5432", proxylog.REFUSED),
        ("CONNECT", f"localhost:{allowed}", proxylog.ALLOWED),
    ]


def test_a_list_that_leads_to_the_portals_own_services_is_refused_at_submit(slurm, settings):
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    request = session_request(egress=("pypi.org:443", "localhost:6379"))
    with pytest.raises(BackendError, match="localhost:6379 leads to .* portal's own services"):
        slurm.submit(request)
    with pytest.raises(BackendError, match="host:port"):
        slurm.submit(session_request(egress=("127.0.0.1:8080",)))


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _uid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            line = next(ln for ln in f if ln.startswith("Uid:"))
    except (OSError, StopIteration):
        return -1
    return int(line.split()[1])
