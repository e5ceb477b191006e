"""A local job in its image (docs/containers.md): the image pulled into the root's image
cache before the job is stored, and its sandbox built over the image's root file system
instead of the host's system (imagebox.py, shared with the Slurm backend).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from django.conf import settings

from scheduling.backends.base import SubmitRequest
from scheduling.backends.imagebox import (  # noqa: F401 (the local backend's names for them)
    BUSYBOX,
    MAX_SYSTEM_ENTRIES,
    CannotRun,
    busybox_limits,
    host_busybox,
    in_image,
    rootfs_binds,
)
from scheduling.backends.images import CachedImage, ImageCache, ImageError, Pin, Skopeo
from scheduling.backends.local.jobstore import JobStore, now_iso
from scheduling.backends.local.ranks import rank_count
from scheduling.decisions.images import (
    ImageRefError,
    parse_image_ref,
)
from scheduling.decisions.types import Placement
from scheduling.spec import TaskSpec

BUSYBOX_MISSING = (
    "a task with an image needs the host's static busybox (Debian's busybox-static) to set "
    "its limits inside the image: install it on this machine"
)


_CACHES: dict[str, ImageCache] = {}
# Pins the worker holds on the images of the jobs it started, until their supervisors hold
# their own (release_started): no eviction in between. (root, key) -> pin.
_HELD: dict[tuple[str, str], Pin] = {}


def image_cache(root: str) -> ImageCache:
    """The image cache of a local backend's root: `<root>/images`, within the site's cap
    (least recently used images evicted, never one a job holds), its limit on one image's
    unpacked size, and its timeouts (docs/containers.md)."""
    if root not in _CACHES:
        timeout = float(settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S)
        _CACHES[root] = ImageCache(
            os.path.join(root, "images"),
            cap_bytes=settings.SWITCHYARD_IMAGE_CACHE_MAX_MB << 20,
            max_unpacked_bytes=settings.SWITCHYARD_IMAGE_MAX_UNPACKED_MB << 20,
            skopeo=Skopeo(timeout_s=timeout),
            unpack_timeout_s=timeout,
        )
    return _CACHES[root]


def pull_many(root: str, requests: Sequence[SubmitRequest]) -> dict[str, tuple[bool, str]]:
    """Pull the images of these jobs (those that have one) before they are stored: key ->
    (pulled, what it took or why it failed). A job is stored pending only once its image
    is here, so that its start (under the root's lock) never waits for a registry."""
    out = {}
    for request in requests:
        if request.spec.image_digest:
            image, note = pull(image_cache(root), request.spec)
            out[request.key] = (image is not None, note)
    return out


def create(
    store: JobStore, requests: Sequence[SubmitRequest], pulled: dict[str, tuple[bool, str]]
) -> None:
    """Store these jobs (under the root's lock), recording each one's pull (`pull_many`); a
    job another process made meanwhile is left as it is."""
    for request in requests:
        if store.create(request) and request.key in pulled:
            record_pull(store, request.key, *pulled[request.key])


def record_pull(store: JobStore, key: str, ok: bool, note: str) -> None:
    """Record on a job just stored that its image is here (`pull`: what that took, shown in
    its reason as it starts), or fail it saying why not (a retry pulls again)."""
    state = store.read_state(key) or {}
    if ok:
        state["pull"] = [note]
    else:
        state.update(state="failed", reason=note, ended_at=now_iso())
    store.write_state(key, state)
    if not ok:
        store.retire(key)


def prepare(
    root: str, request: SubmitRequest, placement: Placement
) -> tuple[CachedImage | None, str]:
    """The job's image as it starts (here since its submission, unless evicted meanwhile:
    then pulled again), or why it cannot start; (None, "") for a job without one."""
    if not request.spec.image_digest:
        return None, ""
    if rank_count(request.spec, placement) > 1:
        return None, "a task in an image runs on one node for now (docs/containers.md)"
    if not host_busybox():
        return None, BUSYBOX_MISSING
    cache = image_cache(root)
    image, note = pull(cache, request.spec)
    if image is None:
        return None, note
    try:
        _HELD[(root, request.key)] = cache.pin(image.digest)
    except ImageError:
        return None, "the job's image was evicted from this node's cache as it started; retry"
    return image, ""


def release_started(root: str, states: dict[str, dict]) -> None:
    """Let go of the pins this worker took for jobs it started (prepare) once their
    supervisors hold their own: they are past "starting" (or gone)."""
    for where, key in list(_HELD):
        if where == root and (states.get(key) or {}).get("state") != "starting":
            _HELD.pop((where, key)).release()


def why_not(exc: Exception) -> str:
    """The reason a job whose launch plan could not be made fails with (only that job)."""
    if isinstance(exc, CannotRun):
        return str(exc)
    return f"the local backend could not prepare the job's start: {exc!r}"


def pin_of(root: str, image: CachedImage | None) -> list[str] | None:
    """What the supervisor holds while the job runs, so that the image is not evicted: the
    image's use lock (shared) and the file that says it is whole."""
    if image is None:
        return None
    hexa = image.digest.partition(":")[2]
    cache = image_cache(root)
    return [str(cache.locks / f"{hexa}.use"), str(cache.images / hexa / "image.json")]


def pull(cache: ImageCache, spec: TaskSpec) -> tuple[CachedImage | None, str]:
    """The job's image, here (pulled by digest if need be), and a line saying what that took;
    or None and why not (the attempt fails with it; a retry pulls again)."""
    try:
        # Named in full at submission: the default registry is never used here.
        ref = parse_image_ref(spec.image, default_registry="localhost")
        ref = ref.with_digest(spec.image_digest or "")
    except ImageRefError as exc:
        return None, f"image {spec.image!r} cannot be pulled: {exc}"
    before = cache.get(ref.digest or "")
    try:
        image = cache.pull(ref)
    except ImageError as exc:
        return None, f"pulling image {spec.image} failed: {exc.reason}"
    config = image.config
    if spec.command is None and spec.script is None and not (config.entrypoint or config.cmd):
        return None, (
            f"image {spec.image} has neither Entrypoint nor Cmd in its config, and the task "
            "gives no command: give it a command or a script"
        )
    if before is not None:
        return image, f"image {spec.image} was cached on this node"
    return image, (
        f"image {spec.image} pulled in {image.pull_seconds:.1f}s "
        f"({image.pull_bytes / 1e6:.1f} MB), not counted in its walltime"
    )
