"""A live sandbox's network by policy, from inside a real sandbox (docs/sandbox-network.md):
its only way out is the session's tinyproxy, which lets exactly the listed host:port through
and refuses everything else, each request in the session's audit.

Real tinyproxy (Debian's, make system-deps), real bubblewrap run by switchyard-job, real
Redis and PostgreSQL where they run here. The test servers listen on every address of this
host, so a request that a refusal kept out would have been answered.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduling.backends.jobnet import host_addresses
from scheduling.backends.session import egress, proxylog
from tests import netprobe
from tests.conftest import in_ci
from tests.servers import need
from tests.unit.scheduling.egress.helpers import (
    GREETING,
    alive,
    http_server,
    in_sandbox,
    run_as,
    session_folder,
)

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("the proxy and the sandbox run as switchyard-job: needs root")

PROXY = "http://127.0.0.1:3128"

# Runs inside the sandbox: each check of argv[1] (a JSON list), one JSON line of results.
PROBE = r"""
import json, socket, sys, urllib.error, urllib.request

def http(url, proxied=True):
    handlers = [] if proxied else [urllib.request.ProxyHandler({})]
    try:
        with urllib.request.build_opener(*handlers).open(url, timeout=10) as answer:
            return [answer.status, answer.read(4000).decode()]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.reason]
    except OSError as exc:
        return ["error", str(getattr(exc, "reason", exc))]

def connect(target, then=b""):
    try:
        s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                break
            head += chunk
        status = head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else "none"
        said = ""
        if status == "200" and then:
            s.sendall(then)
            data = head.partition(b"\r\n\r\n")[2]
            while chunk := s.recv(4096):
                data += chunk
            said = data.decode(errors="replace")
        return [int(status) if status.isdigit() else status, said]
    except OSError as exc:
        return ["error", str(exc)]

def direct(host, port):
    try:
        socket.create_connection((host, port), timeout=5).close()
        return ["connected", ""]
    except OSError as exc:
        return ["error", str(exc)]

results = {}
for label, kind, *args in json.loads(sys.argv[1]):
    if kind == "connect" and len(args) > 1:
        args[1] = args[1].encode()
    results[label] = {"http": http, "direct": direct, "connect": connect}[kind](*args)
print(json.dumps(results))
"""


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    """(allowed port, another port): two test servers on this host."""
    with http_server(GREETING) as allowed, http_server("other-port") as other:
        yield allowed, other


@pytest.fixture
def session(job_root, servers) -> Iterator[tuple[object, tuple[int, int, int]]]:
    """A session's folder and its proxy, allowing exactly localhost:<allowed port>."""
    need("tinyproxy", egress.find("tinyproxy"))
    need("the account switchyard-job (make system-deps)", _account_exists())
    folder = session_folder(job_root)
    handle = egress.start(
        str(folder),
        [f"localhost:{servers[0]}"],
        socket_path=str(folder / "egress.sock"),
        run_as=run_as(),
    )
    yield folder, handle
    egress.stop(handle)


def _account_exists() -> bool:
    try:
        run_as()
    except KeyError:
        return False
    return True


def test_only_the_listed_host_and_port_pass_and_everything_else_is_refused(session, servers):
    folder, _ = session
    allowed, other = servers
    name = socket.gethostname()
    outside = next((a for a in host_addresses() if not a.startswith("127.")), "10.0.2.2")
    with netprobe.control_plane() as portal:
        checks = [
            ["allowed", "http", f"http://localhost:{allowed}/hello"],
            ["allowed over CONNECT", "connect", f"localhost:{allowed}", "GET /t HTTP/1.0\r\n\r\n"],
            ["unlisted host", "http", f"http://{name}:{allowed}/"],
            ["raw IP", "http", f"http://127.0.0.1:{allowed}/"],
            ["other port", "http", f"http://localhost:{other}/"],
            ["user info", "http", f"http://localhost:{allowed}@127.0.0.1:{other}/"],
            ["portal web", "http", f"http://localhost:{portal['web']}/"],
            ["portal database", "http", f"http://localhost:{portal['db']}/"],
            ["redis", "http", "http://localhost:6379/"],
            ["redis over CONNECT", "connect", "localhost:6379"],
            ["postgresql", "http", "http://localhost:5432/"],
            ["postgresql over CONNECT", "connect", "localhost:5432"],
            ["https unlisted", "connect", "example.com:443"],
            ["CONNECT unlisted at the allowed port", "connect", f"{name}:{allowed}"],
            ["no proxy", "http", f"http://localhost:{allowed}/", False],
            ["direct loopback", "direct", "127.0.0.1", allowed],
            ["direct redis", "direct", "127.0.0.1", 6379],
            ["direct host", "direct", outside, allowed],
        ]
        env = {k: PROXY for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
        done = in_sandbox(folder, PROBE, json.dumps(checks), sockets={"egress.sock": 3128}, env=env)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)

    status, body = got.pop("allowed")
    assert status == 200 and body.startswith(f"{GREETING} "), got
    seen = json.loads(body.removeprefix(f"{GREETING} "))
    assert seen["path"] == "/hello"
    # Nothing about the sandbox or this host is added on the way.
    assert not {"via", "x-forwarded-for", "forwarded", "x-tinyproxy"} & set(seen["headers"])
    status, said = got.pop("allowed over CONNECT")
    assert status == 200 and GREETING in said, said
    for label in ("no proxy", "direct loopback", "direct redis"):
        status, why = got.pop(label)
        assert status == "error" and "refused" in why.lower(), (label, why)  # its own loopback
    status, why = got.pop("direct host")
    assert status == "error" and "unreachable" in why.lower(), why  # no route at all
    # Every other request reached the proxy and was refused by it.
    assert {label: status for label, (status, _) in got.items()} == dict.fromkeys(got, 403)

    records = proxylog.read(str(folder / egress.LOG_NAME))
    decided = {(r["method"], r["target"]): r["decision"] for r in records}
    assert decided[("GET", f"localhost:{allowed}")] == proxylog.ALLOWED
    assert decided[("CONNECT", f"localhost:{allowed}")] == proxylog.ALLOWED
    for target in (
        f"{name}:{allowed}",
        f"127.0.0.1:{allowed}",
        f"localhost:{other}",
        f"127.0.0.1:{other}",
        f"localhost:{portal['web']}",
        "localhost:6379",
        "localhost:5432",
    ):
        assert decided[("GET", target)] == proxylog.REFUSED, (target, records)
    for target in ("localhost:6379", "localhost:5432", "example.com:443", f"{name}:{allowed}"):
        assert decided[("CONNECT", target)] == proxylog.REFUSED, (target, records)
    assert len(records) == 2 + len(got), records  # one record per request the proxy saw


def test_stopping_the_session_ends_the_proxy_and_its_relay(job_root, servers):
    need("tinyproxy", egress.find("tinyproxy"))
    folder = session_folder(job_root)
    sock = str(folder / "egress.sock")
    handle = egress.start(
        str(folder), [f"localhost:{servers[0]}"], socket_path=sock, run_as=run_as()
    )
    keeper = handle[0]
    proxies = _children(keeper)
    assert len(proxies) == 1 and alive(proxies[0])
    assert os.stat(sock).st_uid == run_as()[0] and os.stat(sock).st_mode & 0o777 == 0o600
    relay = _listening(handle[2])  # the relay's socket, as the session's account
    assert relay and {uid for uid, _ in relay} == {run_as()[0]}
    egress.stop(handle)
    assert not alive(keeper) and not alive(proxies[0])
    with pytest.raises(OSError), socket.socket(socket.AF_UNIX) as s:
        s.connect(sock)
    # The relay's socket is gone (a connect, or the port alone, could reach another test's
    # relay or server that the freed port was given to meanwhile: its socket is another one).
    assert not relay & _listening(handle[2])


def _listening(port: int) -> set[tuple[int, int]]:
    """(account, socket inode) of each socket listening on TCP `port` (/proc/net/tcp, tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                found.add((int(fields[7]), int(fields[9])))
    return found


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def test_the_proxy_runs_as_the_jobs_account_and_never_as_root(job_root, servers):
    need("tinyproxy", egress.find("tinyproxy"))
    folder = session_folder(job_root)
    allow = [f"localhost:{servers[0]}"]
    with pytest.raises(egress.EgressError, match="never runs as root"):
        egress.start(str(folder), allow, socket_path=str(folder / "s"), run_as=(0, 0))
    handle = egress.start(str(folder), allow, socket_path=str(folder / "s"), run_as=run_as())
    try:
        for pid in [handle[0], *_children(handle[0])]:
            with open(f"/proc/{pid}/status") as f:
                ids = {
                    ln.split(":")[0]: ln.split()[1:] for ln in f if ln.startswith(("Uid", "Gid"))
                }
            assert ids["Uid"] == [str(run_as()[0])] * 4, ids
            assert ids["Gid"] == [str(run_as()[1])] * 4, ids
    finally:
        egress.stop(handle)


def test_without_tinyproxy_a_session_with_egress_does_not_start(job_root):
    folder = session_folder(job_root)
    with pytest.raises(egress.EgressError, match="tinyproxy is not installed"):
        egress.start(
            str(folder),
            ["pypi.org:443"],
            socket_path=str(folder / "s"),
            run_as=run_as(),
            tinyproxy=str(folder / "no-tinyproxy"),
        )


def test_starting_a_sessions_proxy_takes_milliseconds(job_root, servers):
    """What egress adds to a session's start: tinyproxy up and accepting, relay ready."""
    need("tinyproxy", egress.find("tinyproxy"))
    folder = session_folder(job_root)
    took = []
    for _ in range(15):
        begun = time.perf_counter()
        handle = egress.start(
            str(folder), [f"localhost:{servers[0]}"], socket_path=str(folder / "s"), run_as=run_as()
        )
        took.append((time.perf_counter() - begun) * 1000)
        egress.stop(handle)
    took.sort()
    print(f"egress start: p50 {took[len(took) // 2]:.1f} ms, max {took[-1]:.1f} ms")
    assert took[len(took) // 2] < 250, took
    shutil.rmtree(folder)


def test_a_proxy_that_dies_ends_its_relay_and_a_long_socket_path_works(job_root, servers):
    need("tinyproxy", egress.find("tinyproxy"))
    folder = session_folder(job_root)
    deep = folder / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    sock = str(deep / "egress.sock")
    assert len(sock) > 107
    handle = egress.start(
        str(folder), [f"localhost:{servers[0]}"], socket_path=sock, run_as=run_as()
    )
    try:
        assert os.stat(sock).st_mode & 0o777 == 0o600
        (proxy,) = _children(handle[0])
        os.kill(proxy, 9)
        end = time.monotonic() + 5
        while os.waitid(os.P_PID, handle[0], os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < end, "the keeper outlived its proxy"
            time.sleep(0.01)
    finally:
        egress.stop(handle)
    assert not alive(handle[0])


def test_a_session_folder_under_tmp_reaches_the_confined_proxy(servers):
    """tinyproxy runs with a /tmp of its own (docs/sandbox-network.md): its session's folder,
    with its configuration, is bound in wherever it is, /tmp included."""
    need("tinyproxy", egress.find("tinyproxy"))
    root = Path(tempfile.mkdtemp(prefix="sy-egress-", dir="/tmp"))
    try:
        root.chmod(0o755)
        folder = session_folder(root)
        allow = [f"localhost:{servers[0]}"]
        handle = egress.start(str(folder), allow, socket_path=str(folder / "s"), run_as=run_as())
        egress.stop(handle)
    finally:
        shutil.rmtree(root)
