"""What keeps a node's image cache (cache.py) bounded: the download checked against the
image's manifest before and while it lands, what a crashed pull left swept away, the pull
log kept short, and the blobs of in-flight pulls told apart from unused ones
(docs/containers.md, "The node's image cache").

- **Before a pull** the image's manifest (its platform's, for an index) gives every blob the
  pull will write and its size: over the node's limit for one download, the image is
  refused before a byte of it is copied.
- **While it pulls** skopeo's partial files are watched: a registry that sends more bytes
  than the manifest declares has skopeo killed. (skopeo would refuse such a blob anyway,
  since its digest no longer matches, but only once the registry stops sending: until then
  it writes whatever comes.)
- **In-flight pulls** list the blobs they will use in `locks/<hex>.blobs`, under a brief
  shared hold of `gc.lock`; collection (exclusive `gc.lock`) keeps those of every pull whose
  pull lock is held, so it need not wait for every pull to end.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduling.backends.images.layout import blob_path
from scheduling.backends.images.skopeo import BadImage, PullFailed, Skopeo
from scheduling.decisions.catalogue import platform_manifest
from scheduling.decisions.images import ImageRef

MAX_PULL_LOG_BYTES = 1 << 20  # pulls.log is moved to pulls.log.1 past this
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}  # uname's names → OCI's
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class PullPlan:
    """What pulling an image writes, as its manifests declare: every blob (manifests,
    config, layers) with its size, and the layers among them."""

    blobs: dict[str, int]
    layers: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.blobs.values())


def _size(descriptor: Any, what: str) -> tuple[str, int]:
    if not isinstance(descriptor, dict):
        raise BadImage(f"the image's manifest: expected a descriptor for its {what}")
    digest, size = descriptor.get("digest"), descriptor.get("size")
    if not isinstance(digest, str) or not isinstance(size, int) or size < 0:
        raise BadImage(
            f"the image's manifest: expected a digest and a size in bytes for its {what}, "
            f"got {json.dumps(descriptor)[:120]}"
        )
    return digest, size


def _json(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise BadImage("the image's manifest is not a JSON object")
    return data


def pull_plan(skopeo: Skopeo, ref: ImageRef) -> PullPlan:
    """The blobs a pull of the pinned `ref` writes, from its manifest (for an index, the
    manifest of this node's platform, which is the one skopeo copies)."""
    assert ref.digest is not None
    raw = skopeo.manifest(ref)
    blobs = {ref.digest: len(raw)}
    data = _json(raw)
    if "manifests" in data:
        arch = _ARCHES.get(platform.machine(), platform.machine())
        child = platform_manifest(data, arch=arch)
        if child is None:
            raise BadImage(f"expected an image for linux/{arch}: the index lists none")
        raw = skopeo.manifest(ref.with_digest(child))
        blobs[child] = len(raw)
        data = _json(raw)
    config, size = _size(data.get("config"), "config")
    blobs[config] = size
    layers = dict(_size(layer, "layer") for layer in data.get("layers") or [])
    return PullPlan(blobs={**blobs, **layers}, layers=layers)


def check_plan(plan: PullPlan, limit: int | None) -> None:
    """Refuse a pull whose blobs add up to more than `limit` bytes (None: no limit)."""
    if limit is not None and plan.total > limit:
        raise BadImage(
            f"the image's manifest lists {plan.total / 1e6:.0f} MB to download, more than "
            f"this node pulls for one image ({limit / 1e6:.0f} MB, SWITCHYARD_IMAGE_MAX_PULL_MB)"
        )


def watch(
    plan: PullPlan, layout: Path, blobs: Path, progress: Progress | None
) -> Callable[[], None]:
    """A poll for skopeo's copy into `layout`: it tells `progress` how many of the layer bytes
    are here (the layers already stored, and what skopeo has written of the others), and
    raises BadImage (skopeo is then killed) once skopeo's partial files hold more than the
    manifest declares."""
    total = sum(plan.layers.values())
    shown = 0

    def poll() -> None:
        nonlocal shown
        partial = 0
        for path in layout.glob("oci-put-blob*"):
            with contextlib.suppress(FileNotFoundError):
                partial += path.stat().st_size
        if partial > plan.total:
            raise BadImage(
                f"the registry sent more than the image's manifest declares ({partial} bytes "
                f"written, {plan.total} declared): the pull was stopped"
            )
        if progress is None:
            return
        done = partial
        for digest, size in plan.layers.items():
            if blob_path(blobs, digest).exists():
                done += size
        # A blob renamed between the two looks may count twice or not at all: what is
        # shown never goes back, nor past the total.
        shown = max(shown, min(done, total) if total else done)
        progress(shown, total)

    poll()
    return poll


@contextlib.contextmanager
def flock(path: Path, mode: int, timeout_s: float = 0.0) -> Iterator[bool]:
    """Hold `path`'s lock in `mode`; with LOCK_NB, yields False when another holds it (still
    after `timeout_s` of trying)."""
    # The worker's alone (and locks/ is 0700): another account holding one would stall pulls.
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, mode)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.1)
        yield True
    finally:
        os.close(fd)


def _pulling(locks: Path, hexa: str) -> bool:
    """True while a pull of the image holds its pull lock."""
    with _unless_pulling(locks, hexa) as free:
        return not free


@contextlib.contextmanager
def _unless_pulling(locks: Path, hexa: str) -> Iterator[bool]:
    """Holds the image's pull lock (yields True) unless a pull holds it (False)."""
    if len(hexa) != 64 or not all(c in "0123456789abcdef" for c in hexa):
        yield True  # not an image's: no pull of it can run
        return
    with flock(locks / f"{hexa}.pull", fcntl.LOCK_EX | fcntl.LOCK_NB) as free:
        yield free


@contextlib.contextmanager
def in_flight(root: Path, hexa: str, plan: PullPlan, timeout_s: float) -> Iterator[None]:
    """While the caller (holding the image's pull lock) pulls, the blobs of `plan` are its
    own: collection keeps them. PullFailed if collection holds `gc.lock` for over
    `timeout_s` (it takes it only briefly)."""
    listed = root / "locks" / f"{hexa}.blobs"
    with flock(root / "gc.lock", fcntl.LOCK_SH | fcntl.LOCK_NB, timeout_s) as held:
        if not held:
            raise PullFailed(
                f"the node's image cache was being cleaned for over {timeout_s:g}s; try again later"
            )
        listed.write_text(json.dumps(sorted(plan.blobs)))
    try:
        yield
    finally:
        listed.unlink(missing_ok=True)


def in_flight_blobs(root: Path) -> set[str]:
    """The blobs pulls that run now will use (call it holding `gc.lock` exclusively). A list
    left by a pull that died is removed."""
    used: set[str] = set()
    for listed in (root / "locks").glob("*.blobs"):
        hexa = listed.name.partition(".")[0]
        if not _pulling(root / "locks", hexa):
            listed.unlink(missing_ok=True)
            continue
        with contextlib.suppress(FileNotFoundError, ValueError):
            used |= set(json.loads(listed.read_text()))
    return used


def sweep(root: Path, *, older_than_s: float, remove: Callable[[Path], None]) -> list[str]:
    """Remove what pulls and evictions that died left: entries of `tmp/` older than
    `older_than_s` whose image no pull holds now, and layouts of images that are not here
    and that no pull holds. Returns the names removed."""
    gone: list[str] = []
    now = time.time()
    for entry in list((root / "tmp").iterdir()):
        try:
            age = now - entry.lstat().st_mtime
        except FileNotFoundError:
            continue
        # <hex>.<id>: an image being unpacked; evicted.<hex>.<id>: one being removed.
        hexa = entry.name.removeprefix("evicted.").partition(".")[0]
        if age < older_than_s:
            continue
        with _unless_pulling(root / "locks", hexa) as free:
            if free:
                remove(entry)
                gone.append(f"tmp/{entry.name}")
    for layout in list((root / "layouts").iterdir()):
        with _unless_pulling(root / "locks", layout.name) as free:
            if free and not (root / "images" / layout.name).exists():
                shutil.rmtree(layout, ignore_errors=True)
                gone.append(f"layouts/{layout.name}")
    return gone


def log_pull(root: Path, line: dict[str, Any]) -> None:
    """Append one pull to `pulls.log`, first moved to `pulls.log.1` once over
    MAX_PULL_LOG_BYTES (so the two together stay about twice that)."""
    log = root / "pulls.log"
    with contextlib.suppress(FileNotFoundError):
        if log.stat().st_size > MAX_PULL_LOG_BYTES:
            os.replace(log, root / "pulls.log.1")
    with open(log, "a") as out:
        out.write(json.dumps(line) + "\n")
