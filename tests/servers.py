"""A Redis and a PostgreSQL of a test's own, on free ports, that the test may stop, kill and
start again (the shared servers of `.ci/run` must never be restarted by a test).

Both come from the machine's packages (Debian's `redis-server` and `/usr/lib/postgresql/*/
bin`, installed by `make system-deps`). Without them a test skips here and fails in CI.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import in_ci


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(what: str, found: object) -> None:
    if found:
        return
    if in_ci():
        pytest.fail(f"CI must have {what} (make system-deps installs it)")
    pytest.skip(f"needs {what} (CI has it)")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


class RedisServer:
    """redis-server on a free port, append-only like the deployment's (a restart keeps what
    was written), in `folder`."""

    def __init__(self, folder: Path) -> None:
        need("redis-server", shutil.which("redis-server"))
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        argv = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.folder),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--maxmemory-policy",
            "noeviction",
            "--logfile",
            "redis.log",
        ]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
        _wait(lambda: _listening(self.port), timeout=10, what=f"redis-server on {self.port}")
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)
        self.proc = None

    def restart(self, down_seconds: float = 0.5) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()


class PostgresServer:
    """A PostgreSQL cluster of its own (initdb into a fresh folder), trusting local connections.

    initdb refuses to run as root, so as root the cluster belongs to the `postgres` account;
    its folder is made under the system's temporary folder, where that account may reach it.
    """

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        need("PostgreSQL's server (/usr/lib/postgresql/*/bin)", bins)
        self.bin = Path(bins[-1]).parent
        self.user: str | None = None
        if os.geteuid() == 0:
            need("the postgres account", _account("postgres"))
            self.user = "postgres"
        self.folder = Path(tempfile.mkdtemp(prefix="switchyard-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/switchyard"

    def _run(self, *argv: str, check: bool = True, timeout: float = 60) -> None:
        if self.user:
            argv = ("runuser", "-u", self.user, "--", *argv)
        subprocess.run(
            argv,
            check=check,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )

    def init(self) -> PostgresServer:
        if self.user:
            info = pwd.getpwnam(self.user)
            os.chown(self.folder, info.pw_uid, info.pw_gid)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        return self

    def start(self) -> PostgresServer:
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
            "-c max_connections=100"
        )
        self._run(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.folder / "postgres.log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        return self

    def stop(self, mode: str = "fast") -> None:
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False
        )

    def restart(self, down_seconds: float = 0.5) -> None:
        self.stop()
        time.sleep(down_seconds)
        self.start()

    def remove(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def create_database(self, name: str = "switchyard") -> None:
        import psycopg

        with psycopg.connect(
            f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')


def _account(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
