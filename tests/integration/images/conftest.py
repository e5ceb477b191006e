"""Fixtures for the tests against a real registry: Debian's docker-registry on 127.0.0.1 with
the images docker/images/registry.sh builds (docs/containers.md).

The fixture runs the script's `start` (idempotent: seconds when it already runs). Where it
cannot (not root, no package mirror), these tests fail in CI and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import os
import selectors
import socket
import subprocess
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from scheduling.backends.base import SubmitRequest
from scheduling.backends.images import ImageCache, Skopeo
from scheduling.backends.local import LocalBackend
from scheduling.decisions.images import ImageRef, parse_image_ref
from scheduling.decisions.types import NodeView
from tests.conftest import ROOT, in_ci
from tests.unit.scheduling.local_backend.helpers import finished, request

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


class ImageBuilder:
    """Images made for one test and pushed to the test registry as `test/<name>:<tag>`: the
    base image (switchyard/base:1) with one more layer of `entries` and its config changed by
    `config` (a key set to None is removed). Written as an OCI layout by hand, so that a
    config no build tool would write (no Entrypoint nor Cmd, an Env that is not NAME=value, a
    WorkingDir with ..) can be had too."""

    def __init__(self, registry: str, folder: Path) -> None:
        self.registry = registry
        self.layout = folder / "layout"
        self.blobs = self.layout / "blobs" / "sha256"
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--src-tls-verify=false"]
            + [f"docker://{registry}/switchyard/base:1", f"oci:{self.layout}:base"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        index = json.loads((self.layout / "index.json").read_text())
        self.base_manifest = self._read(index["manifests"][0]["digest"])

    def _read(self, digest: str) -> dict:
        return json.loads((self.blobs / digest.partition(":")[2]).read_bytes())

    def _write(self, data: bytes) -> str:
        hexa = hashlib.sha256(data).hexdigest()
        (self.blobs / hexa).write_bytes(data)
        return f"sha256:{hexa}"

    def push(
        self,
        name: str,
        *,
        config: dict | None = None,
        entries: Sequence[tuple[str, str, str]] = (),
        tag: str | None = None,
        annotations: dict[str, str] | None = None,
    ) -> str:
        """Push the image; its reference. `entries` are (kind, path, what): ("dir", path,
        ""), ("file", path, content) or ("link", path, target); `annotations` go into its
        manifest."""
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w") as tar:
            for kind, path, what in entries:
                info = tarfile.TarInfo(path.lstrip("/"))
                info.mtime = 0
                if kind == "dir":
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
                elif kind == "link":
                    info.type, info.linkname = tarfile.SYMTYPE, what
                    tar.addfile(info)
                else:
                    data = what.encode()
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
        layer = gzip.compress(raw.getvalue(), mtime=0)
        manifest = json.loads(json.dumps(self.base_manifest))
        image_config = self._read(manifest["config"]["digest"])
        image_config["rootfs"]["diff_ids"].append(
            "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
        )
        image_config.setdefault("history", []).append({"created_by": f"test {name}"})
        for key, value in (config or {}).items():
            if value is None:
                image_config["config"].pop(key, None)
            else:
                image_config["config"][key] = value
        config_bytes = json.dumps(image_config).encode()
        manifest["config"] = {**manifest["config"], "digest": self._write(config_bytes)}
        manifest["config"]["size"] = len(config_bytes)
        manifest["layers"].append(
            {
                "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                "digest": self._write(layer),
                "size": len(layer),
            }
        )
        if annotations:
            manifest["annotations"] = annotations
        manifest_bytes = json.dumps(manifest).encode()
        tag = tag or uuid.uuid4().hex[:12]
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": self._write(manifest_bytes),
                    "size": len(manifest_bytes),
                    "annotations": {"org.opencontainers.image.ref.name": tag},
                }
            ],
        }
        (self.layout / "index.json").write_text(json.dumps(index))
        reference = f"test/{name}:{tag}"
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
            + [f"oci:{self.layout}:{tag}", f"docker://{self.registry}/{reference}"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        return reference


@pytest.fixture(scope="session")
def build_image(registry, tmp_path_factory) -> ImageBuilder:
    """`build_image.push("name", config={...}, entries=[...])`: see ImageBuilder."""
    return ImageBuilder(registry, tmp_path_factory.mktemp("images"))


NODE = NodeView(name="n1", cpus=16, memory_mib=16 * 1024, gpus=0)


@pytest.fixture
def make(job_root: Path) -> Iterator[Callable[..., LocalBackend]]:
    made: list[LocalBackend] = []

    def _make(nodes: list[NodeView] | None = None, **options) -> LocalBackend:
        inventory = list(nodes or [NODE])
        backend = LocalBackend(
            "local-test",
            root=str(job_root / "root"),
            node_source=lambda alias: inventory,
            kill_grace_s=0.5,
            **options,
        )
        made.append(backend)
        return backend

    yield _make
    for backend in made:
        jobs = Path(backend.root) / "jobs"
        for key in [p.name for p in jobs.iterdir()] if jobs.exists() else []:
            backend.cancel(key)
            finished(backend, key)


@pytest.fixture
def in_image(registry) -> Callable[..., SubmitRequest]:
    """`in_image("demo/tiny:1", key, command, ...)`: a request whose task runs in that image
    of the test registry, pinned to the digest its tag names now (as a submission pins it)."""

    def make_request(image: str, key: str, command: list[str] | None = None, **kw):
        ref = f"{registry}/{image}"
        digest = Skopeo(timeout_s=60).digest(parse_image_ref(ref, default_registry=registry))
        req = request(key, command, **kw)
        spec = dataclasses.replace(req.spec, image=ref, image_digest=digest)
        return dataclasses.replace(req, spec=spec)

    return make_request


@pytest.fixture
def silent() -> Iterator[str]:
    """A registry that takes connections and never answers: its pulls and lookups last their
    timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(listener.accept()[0])

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    stop.set()
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    for conn in held:
        conn.close()
