"""The parts of the node image cache that need no registry: skopeo's failures read as reasons
a researcher understands, and an OCI layout's config and blobs (docs/containers.md). The cache
itself is tested against a real registry in tests/integration/images/."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from scheduling.backends.images import (
    ImageCache,
    ImageError,
    ImageNotFound,
    PullFailed,
    RegistryDenied,
    RegistryUnreachable,
)
from scheduling.backends.images.cache import _seal, _unseal
from scheduling.backends.images.layout import ImageConfig, blobs_of, config_of, layer_sizes
from scheduling.backends.images.skopeo import classify
from scheduling.decisions.images import parse_image_ref

REF = parse_image_ref("demo/tiny:1", default_registry="127.0.0.1:15000")


def fatal(msg: str) -> str:
    # How skopeo 1.9 writes its last words.
    escaped = msg.replace('"', '\\"')
    return f'time="2026-12-05T04:47:48Z" level=fatal msg="{escaped}"\n'


@pytest.mark.parametrize(
    "stderr, kind, reason",
    [
        (
            fatal(
                'Error parsing image name "docker://127.0.0.1:15000/demo/tiny:9": reading '
                "manifest 9 in 127.0.0.1:15000/demo/tiny: manifest unknown: manifest unknown"
            ),
            ImageNotFound,
            "tag 1 not found in 127.0.0.1:15000/demo/tiny",
        ),
        (
            fatal("writing blob: happened during read: unexpected EOF"),
            RegistryUnreachable,
            "registry 127.0.0.1:15000 unreachable",
        ),
        (
            fatal(
                'pinging container registry 127.0.0.1:9: Get "http://127.0.0.1:9/v2/": dial tcp '
                "127.0.0.1:9: connect: connection refused"
            ),
            RegistryUnreachable,
            "registry 127.0.0.1:15000 unreachable",
        ),
        (
            fatal("initializing source: reading manifest 1: unauthorized: authentication required"),
            RegistryDenied,
            "registry 127.0.0.1:15000 refused access to demo/tiny",
        ),
        (
            fatal("Error listing repository tags: fetching tags list: name unknown"),
            ImageNotFound,
            "no image demo/tiny in registry 127.0.0.1:15000",
        ),
        ("", PullFailed, f"pulling {REF} failed (the worker's log has the registry's answer)"),
        # What a registry (or a service it redirected to) answered is never in the reason.
        (
            fatal("reading manifest: invalid status code 500: db_password=hunter2"),
            PullFailed,
            f"pulling {REF} failed (the worker's log has the registry's answer)",
        ),
    ],
)
def test_skopeos_failures_become_reasons(stderr, kind, reason):
    error = classify(stderr, REF, what="tag 1")
    assert type(error) is kind
    assert error.reason == reason == str(error)


def test_only_a_registry_that_may_come_back_is_retryable():
    assert RegistryUnreachable("x").retryable and PullFailed("x").retryable
    assert not ImageNotFound("x").retryable and not RegistryDenied("x").retryable


def _blob(blobs: Path, doc: dict | bytes) -> dict:
    data = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / "sha256").mkdir(parents=True, exist_ok=True)
    (blobs / "sha256" / digest.split(":")[1]).write_bytes(data)
    return {"digest": digest, "size": len(data)}


def test_the_config_and_blobs_are_read_through_an_index(tmp_path):
    blobs, layout = tmp_path / "blobs", tmp_path / "layout"
    layout.mkdir()
    layer = _blob(blobs, b"\x1f\x8b not json")
    config = _blob(
        blobs,
        {"config": {"Env": ["A=1"], "Entrypoint": ["/e"], "Cmd": None, "WorkingDir": "/w"}},
    )
    manifest = _blob(blobs, {"config": config, "layers": [layer]})
    manifest["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
    index = _blob(blobs, {"manifests": [manifest]})
    index["mediaType"] = "application/vnd.oci.image.index.v1+json"
    _blob(blobs, b"a blob nothing uses")
    (layout / "index.json").write_text(json.dumps({"manifests": [index]}))

    assert config_of(layout, blobs) == ImageConfig(env=("A=1",), workdir="/w", entrypoint=("/e",))
    assert layer_sizes(layout, blobs) == {layer["digest"]: layer["size"]}
    assert blobs_of(layout, blobs) == {d["digest"] for d in (index, manifest, config, layer)}
    assert ImageConfig.from_json(config_of(layout, blobs).as_json()) == config_of(layout, blobs)


def test_an_image_config_with_nothing_in_it_runs_with_defaults():
    assert ImageConfig.from_oci({}) == ImageConfig()
    assert ImageConfig.from_oci({"config": None}) == ImageConfig()


def test_an_empty_cache_has_nothing_and_refuses_to_pin_what_it_lacks(tmp_path):
    cache = ImageCache(tmp_path / "cache", cap_bytes=0)
    digest = "sha256:" + "0" * 64
    assert cache.cached() == [] and cache.size() == 0 and cache.get(digest) is None
    assert cache.evict() == []
    with pytest.raises(ImageError, match="not in this node's cache"):
        cache.pin(digest)
    with pytest.raises(ValueError, match="64 hex"):
        cache.get("sha256:abc")


def test_an_unpacked_tree_is_sealed_read_only_without_set_id_bits_and_readable_by_jobs(tmp_path):
    root = tmp_path / "rootfs"
    (root / "private").mkdir(parents=True, mode=0o700)
    (root / "bin").mkdir()
    setuid = root / "bin" / "su"
    setuid.write_text("#!/bin/sh\n")
    setuid.chmod(0o4755)
    secret = root / "private" / "key"
    secret.write_text("k")
    secret.chmod(0o600)
    (root / "bin" / "link").symlink_to("su")

    _seal(root)
    modes = {
        p.relative_to(root).as_posix(): stat.S_IMODE(p.lstat().st_mode)
        for p in [root / "private", root / "bin", setuid, secret]
    }
    assert modes == {"private": 0o555, "bin": 0o555, "bin/su": 0o555, "private/key": 0o444}
    assert stat.S_IMODE(root.stat().st_mode) == 0o555

    _unseal(root)
    assert stat.S_IMODE((root / "private").stat().st_mode) == 0o755
    assert stat.S_IMODE(secret.stat().st_mode) == 0o444  # files stay as they were sealed


def test_images_being_unpacked_are_reachable_by_no_other_account(tmp_path):
    """An image is unpacked with its set-id files, sealed only once whole: the folder it is
    unpacked in is the worker's alone, while the finished images are readable by jobs."""
    cache = ImageCache(tmp_path / "cache", cap_bytes=0)
    assert stat.S_IMODE(cache.tmp.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.images.stat().st_mode) == 0o755
