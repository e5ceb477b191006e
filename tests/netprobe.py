"""What a job's network reaches, tried from inside real jobs (docs/security.md, "Network").

The targets are the host's own (stand-ins for the portal's database, broker and web port,
listening on every address of the host, and the real PostgreSQL and Redis when they run) and
a test host in a network namespace this module makes (a veth pair with addresses from
198.18.0.0/15, the benchmarking range): nothing a test tries ever leaves this machine.
Making the namespace needs root.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

from scheduling.backends.jobnet import host_addresses
from tests.parallel import worker_number

TEST_PORT = 8080
# The test host answers this on every connection: a job that reads it reached the host.
GREETING = "hello-from-the-test-host"
SLIRP_GATEWAY = "10.0.2.2"  # what slirp4netns gives a job as its gateway (the host)

SERVER = f"""
import socket, sys
server = socket.create_server(("0.0.0.0", {TEST_PORT}))
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    conn.sendall(b"{GREETING}\\n")
    conn.close()
"""

PROBE = """
import socket, sys
for target in sys.argv[1:]:
    label, host, port = target.split("|")
    s = socket.socket()
    s.settimeout(3)
    try:
        s.connect((host, int(port)))
        said = s.recv(64).decode() if label.startswith("host:") else ""
        print("REACHED", label, said.strip(), flush=True)
    except OSError as exc:
        print("BLOCKED", label, exc, flush=True)
    finally:
        s.close()
"""


@dataclass(frozen=True)
class TestHost:
    """A host of its own on this machine: `reachable` answers on TEST_PORT, and so do
    `listed`, `broker` and `database` (addresses a test blocks through settings)."""

    __test__ = False  # not a test class, whatever pytest thinks of its name

    outside: str  # this machine's end of the veth
    reachable: str
    listed: str
    broker: str
    database: str


@contextlib.contextmanager
def test_host() -> Iterator[TestHost]:
    """Make the namespace, its veth pair and the server; remove them afterwards."""
    tag = f"syjn{os.getpid() % 100000}"
    # A network of each test process's own: its pid's remainder alone could be another
    # process's too (xdist's workers each get a number: 100 + it).
    number = worker_number()
    net = f"198.18.{100 + number if number is not None else os.getpid() % 100}"
    host = TestHost(f"{net}.1", f"{net}.2", f"{net}.3", f"{net}.4", f"{net}.5")
    ns = f"{tag}-ns"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("netns", "add", ns)
    server = None
    try:
        ip("link", "add", f"{tag}h", "type", "veth", "peer", "name", f"{tag}n")
        ip("link", "set", f"{tag}n", "netns", ns)
        ip("addr", "add", f"{host.outside}/24", "dev", f"{tag}h")
        ip("link", "set", f"{tag}h", "up")
        for address in (host.reachable, host.listed, host.broker, host.database):
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", f"{tag}n")
        ip("-n", ns, "link", "set", f"{tag}n", "up")
        ip("-n", ns, "link", "set", "lo", "up")
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns, "python3", "-I", "-c", SERVER],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        yield host
    finally:
        if server is not None:
            server.kill()
            server.wait()
        subprocess.run(["ip", "link", "del", f"{tag}h"], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@contextlib.contextmanager
def control_plane() -> Iterator[dict[str, int]]:
    """Stand-ins for the portal's database, broker and web port on every address of this
    host ({name: port}), with the real PostgreSQL and Redis when they run here."""
    servers = {name: socket.create_server(("0.0.0.0", 0)) for name in ("db", "broker", "web")}
    try:
        for server in servers.values():
            server.listen(64)
        ports = {name: server.getsockname()[1] for name, server in servers.items()}
        for name, port in (("postgresql", 5432), ("redis", 6379)):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                ports[name] = port
        yield ports
    finally:
        for server in servers.values():
            server.close()


def targets(ports: dict[str, int], host: TestHost) -> list[tuple[str, str, int]]:
    """(label, address, port): every control-plane port at the host's loopback, at each of
    its other addresses and at slirp's gateway; the test host and its blocked addresses."""
    found = []
    addresses = ["127.0.0.1", *(a for a in host_addresses() if not a.startswith("127."))]
    for name, port in ports.items():
        for address in [*addresses, SLIRP_GATEWAY]:
            found.append((f"{name}@{address}", address, port))
    found += [
        ("host:reachable", host.reachable, TEST_PORT),
        ("host:listed", host.listed, TEST_PORT),
        ("host:broker", host.broker, TEST_PORT),
        ("host:database", host.database, TEST_PORT),
    ]
    return found


def probe_argv(found: list[tuple[str, str, int]]) -> list[str]:
    """A command that tries every target from inside a job (python3 from /usr) and prints
    REACHED or BLOCKED for each."""
    return [
        "python3",
        "-I",
        "-c",
        PROBE,
        *(f"{label}|{address}|{port}" for label, address, port in found),
    ]


def probe_command(found: list[tuple[str, str, int]]) -> str:
    """probe_argv as a shell line."""
    return " ".join(shlex.quote(arg) for arg in probe_argv(found))


def reached(log: str) -> set[str]:
    """The labels a job's probe connected to."""
    return {line.split()[1] for line in log.splitlines() if line.startswith("REACHED ")}


def tried(log: str) -> set[str]:
    return {
        line.split()[1] for line in log.splitlines() if line.startswith(("REACHED ", "BLOCKED "))
    }


def reachable_from_here(found: list[tuple[str, str, int]]) -> set[str]:
    """What this test process (on the host's network) reaches: the probes can fail."""
    ok = set()
    for label, address, port in found:
        if address == SLIRP_GATEWAY:
            continue  # an address inside a job's network only
        with contextlib.suppress(OSError), socket.create_connection((address, port), 2):
            ok.add(label)
    return ok
