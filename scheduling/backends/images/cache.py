"""A node's image cache: images pulled by digest, their layers stored once by content, each
image unpacked once into a read-only root file system that every job using it shares
(docs/containers.md).

Under the cache's root:

    blobs/sha256/<hex>        layers, configs and manifests, by content, shared by all images
    layouts/<hex>/            one OCI layout per image (its `blobs` is a link to ../../blobs)
    images/<hex>/rootfs/      the unpacked root file system, read-only
    images/<hex>/image.json   its digest, reference, config (Env, WorkingDir, Entrypoint, Cmd),
                              sizes and pull time; its mtime is when a job last used the image
    locks/<hex>.pull          held while one process pulls the image: others wait, then use it
    locks/<hex>.blobs         the blobs that pull will use, which collection keeps meanwhile
    locks/<hex>.use           held shared by every job that uses the image (a pin); eviction
                              takes it exclusively or leaves the image alone
    locks/<hex>.jobs/<id>     a Slurm job's hold on the image, Prolog to Epilog
                              (reservations.py): eviction leaves the image alone
    gc.lock                   held shared by a pull as it lists its blobs, exclusively by the
                              removal of unused blobs
    pulls.log                 one JSON line per pull made (digest, bytes, seconds); moved to
                              pulls.log.1 once over a MiB

An image appears whole or not at all: it is unpacked under tmp/ and renamed into images/.
What a pull or an eviction that died left there is swept when the cache is opened and at
each eviction (housekeeping.py). The blobs, layouts and locks are the worker's alone (0700,
lock files 0600: a job's supervisor, which pins its image, runs as the worker); the
unpacked root file systems are readable by every local account, which job accounts need.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
import os
import shutil
import stat
import subprocess
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduling.backends.images.housekeeping import (
    Progress,
    check_plan,
    in_flight,
    in_flight_blobs,
    log_pull,
    pull_plan,
    sweep,
    watch,
)
from scheduling.backends.images.housekeeping import flock as _flock
from scheduling.backends.images.layout import (
    BadImageConfig,
    ImageConfig,
    blob_path,
    blobs_of,
    config_of,
    layer_sizes,
    manifest_of,
)
from scheduling.backends.images.reservations import reserved
from scheduling.backends.images.skopeo import BadImage, ImageError, PullFailed, Skopeo
from scheduling.decisions.images import ImageRef

_LAYOUT_NAME = "image"
# An image whose layers hold more than this many files, folders and links is refused.
MAX_UNPACKED_ENTRIES = 1_000_000
_TAR_TYPES = (
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
)


@dataclass(frozen=True, slots=True)
class CachedImage:
    """An image on this node: its root file system and how to run it."""

    digest: str
    reference: str
    rootfs: Path
    config: ImageConfig
    rootfs_bytes: int
    image_bytes: int
    pull_bytes: int
    pull_seconds: float
    last_used: float


def _hex(digest: str) -> str:
    algorithm, _, hexa = digest.partition(":")
    if algorithm != "sha256" or len(hexa) != 64 or not all(c in "0123456789abcdef" for c in hexa):
        raise ValueError(f"expected sha256:<64 hex digits>, got {digest!r}")
    return hexa


def _tree_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _seal(root: Path) -> None:
    """Make an unpacked tree what every job may share: nothing writable, no set-user-id or
    set-group-id bit (the files lie on the host, owned by the cache's account, where any
    local account could run them), and everything readable, folders and programs passable,
    by every job account (in the image a job would have been root and read it all)."""
    for path in [root, *_walk(root)]:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            continue
        mode = stat.S_IMODE(st.st_mode) & ~0o6222 | 0o444
        if stat.S_ISDIR(st.st_mode) or mode & 0o100:
            mode |= 0o111
        os.chmod(path, mode)


def _unseal(root: Path) -> None:
    """Give the owner back the write bit on the folders, so that the tree can be removed."""
    for path in [root, *_walk(root)]:
        st = os.lstat(path)
        if stat.S_ISDIR(st.st_mode):
            os.chmod(path, stat.S_IMODE(st.st_mode) | 0o700)


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            yield Path(dirpath, name)


class Pin:
    """A running job's hold on an image: while it is held, eviction leaves the image alone.
    Release it (or leave the `with`) when the job ends; a process that dies releases it."""

    def __init__(self, image: CachedImage, fd: int) -> None:
        self.image = image
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> CachedImage:
        return self.image

    def __exit__(self, *exc: object) -> None:
        self.release()


class ImageCache:
    """The cache under `root`, at most `cap_bytes` (None: no cap) once pulls are done."""

    def __init__(
        self,
        root: str | Path,
        *,
        cap_bytes: int | None = None,
        skopeo: Skopeo | None = None,
        umoci: str = "umoci",
        max_unpacked_bytes: int | None = None,
        max_pull_bytes: int | None = None,
        unpack_timeout_s: float = 600.0,
    ) -> None:
        self.root = Path(root)
        self.cap_bytes = cap_bytes
        # An image whose layers would unpack to more is refused before unpacking; umoci is
        # killed after unpack_timeout_s.
        self.max_unpacked_bytes = max_unpacked_bytes
        # An image whose manifest lists more to download is refused before it is pulled.
        self.max_pull_bytes = max_pull_bytes
        self.unpack_timeout_s = unpack_timeout_s
        self.skopeo = skopeo or Skopeo()
        self.umoci = umoci
        self.blobs = self.root / "blobs"
        self.layouts = self.root / "layouts"
        self.images = self.root / "images"
        self.locks = self.root / "locks"
        self.tmp = self.root / "tmp"
        for folder in (self.blobs / "sha256", self.layouts, self.images, self.locks, self.tmp):
            folder.mkdir(parents=True, exist_ok=True)
        # An image being unpacked still has its set-id files (sealed only once whole): no
        # other account may reach it.
        self.tmp.chmod(0o700)
        # Job accounts read the root file systems: they must be able to pass through. The
        # blobs and layouts (a private registry's image as it came) are the worker's alone.
        for folder in (self.root, self.images):
            folder.chmod(0o755)
        # The locks too: an account that could open one (flock needs only a read) could
        # hold gc.lock or a pull lock and stall every pull, or pin an image for ever.
        for folder in (self.blobs, self.layouts, self.locks):
            folder.chmod(0o700)
        self.sweep()

    # --- reading --------------------------------------------------------------------------

    def get(self, digest: str) -> CachedImage | None:
        """The image if it is here, whole."""
        folder = self.images / _hex(digest)
        try:
            data = json.loads((folder / "image.json").read_text())
            used = (folder / "image.json").stat().st_mtime
        except FileNotFoundError:
            return None
        return CachedImage(
            digest=data["digest"],
            reference=data["reference"],
            rootfs=folder / "rootfs",
            config=ImageConfig.from_json(data["config"]),
            rootfs_bytes=data["rootfs_bytes"],
            image_bytes=data["image_bytes"],
            pull_bytes=data["pull_bytes"],
            pull_seconds=data["pull_seconds"],
            last_used=used,
        )

    def cached(self) -> list[CachedImage]:
        """Every image here, the most recently used first."""
        found = [self.get(f"sha256:{p.name}") for p in self.images.iterdir() if len(p.name) == 64]
        return sorted((i for i in found if i is not None), key=lambda i: -i.last_used)

    def size(self) -> int:
        """Bytes the cache holds: the root file systems and the blobs."""
        blobs = 0
        for path in (self.blobs / "sha256").iterdir():
            with contextlib.suppress(FileNotFoundError):  # collected meanwhile
                blobs += path.stat().st_size
        return blobs + sum(i.rootfs_bytes for i in self.cached())

    def listing(self) -> tuple[list[CachedImage], int, int, int]:
        """What the cache holds, read only: its images (most recently used first), its bytes,
        and the bytes and count of every pull made into it (pulls.log)."""
        moved = count = 0
        with contextlib.suppress(FileNotFoundError), open(self.root / "pulls.log") as log:
            for line in log:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    moved += int(json.loads(line)["pull_bytes"])
                    count += 1
        return self.cached(), self.size(), moved, count

    # --- resolving and pulling ------------------------------------------------------------

    def resolve(self, ref: ImageRef) -> ImageRef:
        """`ref` pinned to a digest: its own, or the one its tag names now."""
        return ref if ref.digest is not None else ref.with_digest(self.skopeo.digest(ref))

    def pull(
        self,
        ref: ImageRef,
        *,
        progress: Progress | None = None,
        lock_timeout_s: float | None = None,
    ) -> CachedImage:
        """The image `ref` names, pulled and unpacked unless it is here already. Concurrent
        pulls of one digest (from any process) make one pull; the others wait for it, for at
        most `lock_timeout_s` (None: as long as it takes) before PullFailed.
        `progress(done, total)` is told the layer bytes here so far while this pull runs."""
        ref = self.resolve(ref)
        assert ref.digest is not None
        hexa = _hex(ref.digest)
        image = self.get(ref.digest)
        if image is not None:
            return image
        wait = fcntl.LOCK_EX | (0 if lock_timeout_s is None else fcntl.LOCK_NB)
        with _flock(self.locks / f"{hexa}.pull", wait, lock_timeout_s or 0.0) as held:
            if not held:
                raise PullFailed(
                    f"another pull of image {ref.digest} on this node did not end within "
                    f"{lock_timeout_s:g}s"
                )
            image = self.get(ref.digest)
            if image is None:
                image = self._pull_locked(ref, hexa, progress)
        self.evict(keep=ref.digest)
        return image

    def _pull_locked(self, ref: ImageRef, hexa: str, progress: Progress | None) -> CachedImage:
        assert ref.digest is not None
        layout = self.layouts / hexa
        shutil.rmtree(layout, ignore_errors=True)  # what an interrupted pull left
        layout.mkdir()
        (layout / "blobs").symlink_to(os.path.relpath(self.blobs, layout))
        work = self.tmp / f"{hexa}.{uuid.uuid4().hex[:8]}"
        had = {p.name for p in (self.blobs / "sha256").iterdir()}
        started = time.monotonic()
        try:
            # What the manifest lists is checked before a byte is copied, and skopeo is
            # stopped if the registry sends more (housekeeping.py).
            plan = pull_plan(self.skopeo, ref)
            check_plan(plan, self.max_pull_bytes)
            with in_flight(self.root, hexa, plan, self.unpack_timeout_s):
                poll = watch(plan, layout, self.blobs, progress)
                self.skopeo.copy(ref, str(layout), _LAYOUT_NAME, poll=poll)
                poll()  # all of it
            pulled = time.monotonic()
            try:  # what a job would run it with, checked before anything is unpacked
                config = config_of(layout, self.blobs)
            except BadImageConfig as exc:
                raise BadImage(str(exc)) from None
            self._measure(layout)
            work.mkdir(mode=0o700)  # unsealed until _seal below (and tmp/ is 0700)
            self._unpack(layout, work / "rootfs", ref)
            layers = layer_sizes(layout, self.blobs)
            data = {
                "digest": ref.digest,
                "reference": str(ref),
                "config": config.as_json(),
                "rootfs_bytes": _tree_bytes(work / "rootfs"),
                "image_bytes": sum(layers.values()),
                # What this pull moved: layers another image had brought are not counted.
                "pull_bytes": sum(n for d, n in layers.items() if d.partition(":")[2] not in had),
                "pull_seconds": round(pulled - started, 3),
                "unpack_seconds": round(time.monotonic() - pulled, 3),
            }
            _seal(work / "rootfs")
            (work / "image.json").write_text(json.dumps(data, indent=1) + "\n")
            work.chmod(0o755)
            os.rename(work, self.images / hexa)
        except BaseException:
            shutil.rmtree(layout, ignore_errors=True)
            self._remove(work)
            raise
        keys = ("digest", "reference", "image_bytes", "pull_bytes", "pull_seconds")
        log_pull(self.root, {**{k: data[k] for k in keys}, "at": time.time(), "pid": os.getpid()})
        image = self.get(ref.digest)
        assert image is not None
        return image

    def _measure(self, layout: Path) -> None:
        """Refuse an image whose layers would unpack to more than `max_unpacked_bytes` (the
        sizes their tar headers give, counted while decompressing, stopped once over) or more
        than MAX_UNPACKED_ENTRIES entries: a layer may be small and unpack to a disk's worth."""
        if self.max_unpacked_bytes is None:
            return
        limit, total, entries = self.max_unpacked_bytes, 0, 0
        for layer in manifest_of(layout, self.blobs).get("layers", []):
            kind = str(layer.get("mediaType", ""))
            path = blob_path(self.blobs, layer["digest"])
            if kind.endswith(("gzip", ".gzip")):
                stream: Any = gzip.open(path, "rb")  # noqa: SIM115 (closed below)
            elif kind in _TAR_TYPES:
                stream = open(path, "rb")  # noqa: SIM115 (closed below)
            else:
                raise BadImage(
                    f"layer {layer['digest']}: media type {kind!r} is not one this node unpacks (tar or tar+gzip)"
                )
            try:
                with stream, tarfile.open(fileobj=stream, mode="r|") as tar:
                    for member in tar:
                        total += max(member.size, 0)
                        entries += 1
                        if total > limit or entries > MAX_UNPACKED_ENTRIES:
                            raise BadImage(
                                f"the image unpacks to more than {limit / 1e6:.0f} MB or "
                                f"{MAX_UNPACKED_ENTRIES} entries, this node's limit for one "
                                "image (SWITCHYARD_IMAGE_MAX_UNPACKED_MB)"
                            )
            except (tarfile.TarError, OSError, EOFError) as exc:
                raise BadImage(f"layer {layer['digest']} is not a tar archive: {exc}") from None

    def _unpack(self, layout: Path, rootfs: Path, ref: ImageRef) -> None:
        try:
            done = subprocess.run(
                [
                    self.umoci,
                    "raw",
                    "unpack",
                    "--rootless",
                    "--image",
                    f"{layout}:{_LAYOUT_NAME}",
                    str(rootfs),
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=self.unpack_timeout_s,  # umoci is killed, what it left removed
            )
        except FileNotFoundError as e:
            raise PullFailed(f"{self.umoci} is not installed on this node") from e
        except subprocess.TimeoutExpired:
            raise PullFailed(
                f"unpacking {ref} did not finish in {self.unpack_timeout_s:g}s"
            ) from None
        if done.returncode != 0:
            words = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise PullFailed(f"unpacking {ref} failed: {words}")

    # --- using ----------------------------------------------------------------------------

    def pin(self, digest: str) -> Pin:
        """Hold the image for a job (see Pin); ImageError if it is not here (any more)."""
        hexa = _hex(digest)
        fd = os.open(self.locks / f"{hexa}.use", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            image = self.get(digest)
            if image is None:
                raise ImageError(f"image {digest} is not in this node's cache")
            os.utime(self.images / hexa / "image.json")
        except BaseException:
            os.close(fd)
            raise
        return Pin(image, fd)

    def use(self, ref: ImageRef, *, attempts: int = 3) -> Pin:
        """Pull the image if need be and pin it: what a job calls before it starts. An image
        evicted between the pull and the pin is pulled again."""
        ref = self.resolve(ref)
        assert ref.digest is not None
        for attempt in range(attempts):
            self.pull(ref)
            try:
                return self.pin(ref.digest)
            except ImageError:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    # --- eviction -------------------------------------------------------------------------

    def evict(self, cap_bytes: int | None = None, *, keep: str | None = None) -> list[str]:
        """Remove the least recently used images no job holds (nor `keep`, the one just
        pulled for a job) until the cache fits `cap_bytes` (its own cap by default), and the
        blobs no image uses any more. Returns the digests removed."""
        self.sweep()
        cap = self.cap_bytes if cap_bytes is None else cap_bytes
        if cap is None:
            return []
        removed: list[str] = []
        total = self.size()
        for image in reversed(self.cached()):  # the least recently used first
            if total <= cap:
                break
            if image.digest != keep and self._remove_image(image.digest):
                removed.append(image.digest)
                total -= image.rootfs_bytes
                total -= self._collect_blobs()
        return removed

    def _remove_image(self, digest: str) -> bool:
        hexa = _hex(digest)
        with _flock(self.locks / f"{hexa}.use", fcntl.LOCK_EX | fcntl.LOCK_NB) as free:
            if not free or reserved(self.locks, hexa):
                return False  # a job holds it
            folder = self.images / hexa
            if not folder.exists():
                return False
            gone = self.tmp / f"evicted.{hexa}.{uuid.uuid4().hex[:8]}"
            os.rename(folder, gone)  # no longer here for anyone, at once
            shutil.rmtree(self.layouts / hexa, ignore_errors=True)
        self._remove(gone)
        return True

    def sweep(self) -> list[str]:
        """Remove what pulls and evictions that died left (see housekeeping.sweep)."""
        stale = self.skopeo.timeout_s + self.unpack_timeout_s
        return sweep(self.root, older_than_s=stale, remove=self._remove)

    def _collect_blobs(self) -> int:
        """Remove the blobs no layout uses and no running pull listed as its own; bytes
        freed. Skipped only while another collection runs."""
        with _flock(self.root / "gc.lock", fcntl.LOCK_EX | fcntl.LOCK_NB) as free:
            if not free:
                return 0
            used = in_flight_blobs(self.root)
            for layout in self.layouts.iterdir():
                with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                    used |= blobs_of(layout, self.blobs)
            freed = 0
            for path in (self.blobs / "sha256").iterdir():
                if f"sha256:{path.name}" not in used:
                    freed += path.stat().st_size
                    path.unlink()
            return freed

    def _remove(self, folder: Path) -> None:
        if folder.exists():
            _unseal(folder)
            shutil.rmtree(folder, ignore_errors=True)

    def blob(self, digest: str) -> Path:
        return blob_path(self.blobs, digest)
