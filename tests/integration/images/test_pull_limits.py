"""A pull's download is bounded before it lands (docs/containers.md, "The node's image
cache"): an image whose manifest lists more than the node's limit is refused before a byte of
it is copied, and a registry that sends more than its manifest declares is cut off."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.images import BadImage, ImageCache, ImageError, Skopeo
from scheduling.decisions.images import parse_image_ref

pytestmark = [pytest.mark.integration]

CONFIG = json.dumps(
    {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]},
    }
).encode()
LAYER_DECLARED = 1000


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class LyingRegistry:
    """A registry whose one image's layer is declared 1000 bytes long, and which sends
    `sends` bytes of it (None: without end, until the client goes away)."""

    def __init__(self, sends: int | None) -> None:
        self.sends = sends
        self.sent = 0
        self.layer_digest = "sha256:" + "1" * 64
        self.manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": digest(CONFIG),
                    "size": len(CONFIG),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": self.layer_digest,
                        "size": LAYER_DECLARED,
                    }
                ],
            }
        ).encode()
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, *, body: bool) -> None:
                path = self.path
                if path == "/v2/":
                    return self.send(b"{}", "application/json", body)
                if "/manifests/" in path:
                    return self.send(
                        registry.manifest, "application/vnd.oci.image.manifest.v1+json", body
                    )
                if path.endswith(digest(CONFIG)):
                    return self.send(CONFIG, "application/octet-stream", body)
                if path.endswith(registry.layer_digest) and body:
                    return self.stream()
                self.send_response(404)
                self.end_headers()

            def send(self, data: bytes, kind: str, body: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Docker-Content-Digest", digest(data))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def stream(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.end_headers()  # no length: the body ends when the connection does
                chunk = b"\0" * (256 << 10)
                with contextlib.suppress(OSError):
                    while registry.sends is None or registry.sent < registry.sends:
                        n = len(chunk)
                        if registry.sends is not None:
                            n = min(n, registry.sends - registry.sent)
                        self.wfile.write(chunk[:n])
                        registry.sent += n
                        if registry.sent > 4 << 30:
                            return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.ref = parse_image_ref("evil/image:1", default_registry=self.host).with_digest(
            digest(self.manifest)
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def lying_registry() -> Iterator[type[LyingRegistry]]:
    made: list[LyingRegistry] = []

    def make(sends: int | None) -> LyingRegistry:
        made.append(LyingRegistry(sends))
        return made[-1]

    yield make  # type: ignore[misc]
    for registry in made:
        registry.close()


@pytest.mark.registry
def test_an_image_over_the_download_limit_is_refused_before_it_is_copied(job_root, ref):
    cache = ImageCache(job_root / "images", skopeo=Skopeo(timeout_s=60), max_pull_bytes=1000)
    with pytest.raises(BadImage) as caught:
        cache.pull(ref("switchyard/python:3"))
    assert "SWITCHYARD_IMAGE_MAX_PULL_MB" in caught.value.reason
    assert list((cache.blobs / "sha256").iterdir()) == []  # nothing was downloaded
    assert list(cache.layouts.iterdir()) == [] and list(cache.tmp.iterdir()) == []


def test_a_registry_that_sends_more_than_the_manifest_declares_is_cut_off(job_root, lying_registry):
    registry = lying_registry(None)
    cache = ImageCache(job_root / "images", skopeo=Skopeo(timeout_s=60))
    started = time.monotonic()
    with pytest.raises(BadImage) as caught:
        cache.pull(registry.ref)
    assert "more than the image's manifest declares" in caught.value.reason
    assert time.monotonic() - started < 30  # not the pull's timeout
    # Cut off within a poll: a few hundred MB at most, not what the registry would send.
    assert registry.sent < 2 << 30, registry.sent
    assert list(cache.layouts.iterdir()) == [] and list(cache.tmp.iterdir()) == []
    assert list((cache.blobs / "sha256").iterdir()) == [] or all(
        p.stat().st_size <= len(CONFIG) for p in (cache.blobs / "sha256").iterdir()
    )


def test_skopeo_itself_refuses_a_blob_longer_than_declared_once_it_ends(tmp_path, lying_registry):
    # What the cut-off above adds to: skopeo checks each blob's size and digest, so a blob
    # that ends is never stored, however long it was; but it writes what comes until then.
    registry = lying_registry(4 << 20)
    layout = tmp_path / "layout"
    with pytest.raises(ImageError):
        Skopeo(timeout_s=60).copy(registry.ref, str(layout), "x")
    assert registry.sent == 4 << 20  # it read all of it
    stored = layout / "blobs" / "sha256" / registry.layer_digest.partition(":")[2]
    assert not stored.exists()


@pytest.mark.registry
def test_the_local_backends_puller_keeps_the_download_limit(make, in_image, settings):
    """The limit reaches the puller process the local backend starts for a job's image."""
    from tests.integration.images.test_run_local import run

    settings.SWITCHYARD_IMAGE_MAX_PULL_MB = 0  # below any image's size
    backend = make()
    state, reason, _ = run(backend, in_image("switchyard/python:3", "over-limit", ["true"]))
    assert reason.startswith("pulling image ") and "SWITCHYARD_IMAGE_MAX_PULL_MB" in reason, reason
    assert state is JobState.FAILED
