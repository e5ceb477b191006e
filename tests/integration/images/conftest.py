"""Fixtures for the tests against a real registry: Debian's docker-registry on 127.0.0.1 with
the images docker/images/registry.sh builds (docs/containers.md).

The fixture runs the script's `start` (idempotent: seconds when it already runs). Where it
cannot (not root, no package mirror), these tests fail in CI and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduling.backends.images import ImageCache, Skopeo
from scheduling.decisions.images import ImageRef, parse_image_ref
from tests.conftest import ROOT, in_ci

REGISTRY_SH = ROOT / "docker" / "images" / "registry.sh"
STATE_DIR = Path(os.environ.get("SWITCHYARD_REGISTRY_DIR", "/var/tmp/switchyard-registry"))


@pytest.fixture(scope="session")
def registry() -> str:
    """The registry's host:port, started (and its images pushed) if need be."""
    done = subprocess.run(
        ["bash", str(REGISTRY_SH), "start"], capture_output=True, text=True, timeout=900
    )
    address = None
    for line in done.stdout.splitlines():
        if line.startswith("export SWITCHYARD_TEST_REGISTRY="):
            address = line.partition("=")[2]
    if done.returncode != 0 or not address:
        message = f"the localhost registry did not start ({REGISTRY_SH} start):\n"
        message += (done.stdout + done.stderr)[-1500:]
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    return address


@pytest.fixture
def ref(registry):
    """`ref("demo/tiny:1")`: a reference on the test registry."""

    def make(text: str, host: str | None = None) -> ImageRef:
        return parse_image_ref(text, default_registry=host or registry)

    return make


@pytest.fixture
def cache(job_root) -> ImageCache:
    """A fresh node cache where job accounts can reach it (under the test var dir)."""
    return ImageCache(job_root / "images", skopeo=Skopeo(timeout_s=120))


class FlakyProxy:
    """A TCP relay in front of the registry that can be cut: after `cut_after(n)` it drops
    every connection once n more bytes went to the client, and refuses new ones (nothing
    listens on its port) until `restore()`. Its rate limit makes a pull last long enough to
    be cut in the middle."""

    def __init__(self, target: str, *, bytes_per_s: int = 8 << 20) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.rate = bytes_per_s
        self.sent = 0
        self._limit: int | None = None
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._stop = threading.Event()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.address = f"127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self.restore()

    def restore(self) -> None:
        self._limit = None
        self._stop.clear()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut_after(self, n: int) -> None:
        with self._lock:
            self._limit = self.sent + n

    @property
    def cut(self) -> bool:
        return self._stop.is_set()

    def _cut_now(self) -> None:
        self._stop.set()
        if self._listener is not None:
            # shutdown wakes the accept() blocked on it (close alone would not free the port).
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        with self._lock:
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def close(self) -> None:
        self._cut_now()

    def _accept(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
            threading.Thread(target=self._relay, args=(client, upstream), daemon=True).start()

    def _relay(self, client: socket.socket, upstream: socket.socket) -> None:
        sel = selectors.DefaultSelector()
        sel.register(client, selectors.EVENT_READ, upstream)
        sel.register(upstream, selectors.EVENT_READ, client)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.1):
                    source = key.fileobj
                    assert isinstance(source, socket.socket)
                    data = source.recv(64 << 10)
                    if not data:
                        return
                    key.data.sendall(data)
                    if source is upstream:
                        with self._lock:
                            self.sent += len(data)
                            over = self._limit is not None and self.sent >= self._limit
                        if over:
                            self._cut_now()
                            return
                        time.sleep(len(data) / self.rate)
        except OSError:
            return
        finally:
            sel.close()
            for s in (client, upstream):
                s.close()


@pytest.fixture
def flaky_registry(registry) -> Iterator[FlakyProxy]:
    proxy = FlakyProxy(registry)
    yield proxy
    proxy.close()
