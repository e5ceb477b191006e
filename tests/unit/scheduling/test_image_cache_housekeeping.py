"""What keeps a node's image cache bounded without a registry (housekeeping.py,
docs/containers.md): what a crashed pull left is swept, the pull log is kept short, blobs are
collected while other pulls run but never those a running pull listed, and the blobs and
layouts are the worker's alone."""

from __future__ import annotations

import fcntl
import json
import os
import stat
import time
from pathlib import Path

import pytest

from scheduling.backends.images import ImageCache, Skopeo
from scheduling.backends.images.housekeeping import MAX_PULL_LOG_BYTES, log_pull

HEX_A, HEX_B, HEX_C = "a" * 64, "b" * 64, "c" * 64


@pytest.fixture
def root(tmp_path) -> Path:
    ImageCache(tmp_path / "cache")  # its folders
    return tmp_path / "cache"


def opened(root: Path) -> ImageCache:
    return ImageCache(root, skopeo=Skopeo(timeout_s=60), unpack_timeout_s=60)


def old(path: Path, seconds: float = 3600) -> Path:
    then = time.time() - seconds
    os.utime(path, (then, then), follow_symlinks=False)
    return path


def hold_pull(root: Path, hexa: str) -> int:
    """Hold the image's pull lock as a running pull does (closing the fd lets go)."""
    fd = os.open(root / "locks" / f"{hexa}.pull", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_what_a_crashed_pull_or_eviction_left_is_swept_when_the_cache_opens(root):
    crashed = root / "tmp" / f"{HEX_A}.1234abcd"
    (crashed / "rootfs" / "usr").mkdir(parents=True)
    (crashed / "rootfs" / "usr" / "suid").write_text("x")
    (crashed / "rootfs" / "usr").chmod(0o555)  # as an unpack leaves folders: not writable
    old(crashed)
    evicted = root / "tmp" / f"evicted.{HEX_B}.5678abcd"
    (evicted / "rootfs").mkdir(parents=True)
    old(evicted)
    orphan = root / "layouts" / HEX_C  # a layout whose image never arrived
    orphan.mkdir()
    young = root / "tmp" / f"{HEX_C}.0000abcd"  # may be a pull's that is still running
    young.mkdir()
    opened(root)
    assert not crashed.exists() and not evicted.exists() and not orphan.exists()
    assert young.exists()


def test_the_sweep_leaves_what_a_running_pull_holds(root):
    running = root / "tmp" / f"{HEX_A}.1234abcd"
    running.mkdir()
    old(running)
    (root / "layouts" / HEX_A).mkdir()
    fd = hold_pull(root, HEX_A)
    try:
        cache = opened(root)
        assert running.exists() and (root / "layouts" / HEX_A).exists()
    finally:
        os.close(fd)
    cache.evict(0)  # an eviction sweeps too
    assert not running.exists() and not (root / "layouts" / HEX_A).exists()


def test_blobs_are_collected_while_a_pull_runs_except_those_it_listed(root):
    blobs = root / "blobs" / "sha256"
    mine, unused = blobs / HEX_B, blobs / HEX_C
    mine.write_bytes(b"a layer the running pull reuses")
    unused.write_bytes(b"a layer no image uses")
    fd = hold_pull(root, HEX_A)
    (root / "locks" / f"{HEX_A}.blobs").write_text(json.dumps([f"sha256:{HEX_B}"]))
    try:
        freed = opened(root)._collect_blobs()
        assert freed == len(b"a layer no image uses")
        assert mine.exists() and not unused.exists()
    finally:
        os.close(fd)
    # The pull died without removing its list: its blobs are no longer kept.
    opened(root)._collect_blobs()
    assert not mine.exists() and not (root / "locks" / f"{HEX_A}.blobs").exists()


def test_the_pull_log_is_moved_aside_once_over_its_size(root):
    log = root / "pulls.log"
    log.write_text("x" * (MAX_PULL_LOG_BYTES + 1))
    log_pull(root, {"digest": "sha256:" + HEX_A})
    assert (root / "pulls.log.1").stat().st_size == MAX_PULL_LOG_BYTES + 1
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"digest": "sha256:" + HEX_A}
    ]
    for _ in range(3):
        log_pull(root, {"digest": "sha256:" + HEX_B})
    assert len(log.read_text().splitlines()) == 4


def test_blobs_and_layouts_are_the_workers_alone(root):
    cache = opened(root)
    for folder in (cache.blobs, cache.layouts, cache.tmp):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    # Job accounts pass through to the root file systems.
    for folder in (cache.root, cache.images):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o755, folder
