"""A local job in its image (docs/containers.md): the image pulled into the root's image
cache while the job waits (pulls.py), pinned as it starts, and its sandbox built over the
image's root file system instead of the host's system (imagebox.py, shared with the Slurm
backend).
"""

from __future__ import annotations

import os

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
from scheduling.backends.local.ranks import rank_count
from scheduling.decisions.types import Placement

BUSYBOX_MISSING = (
    "a task with an image needs the host's static busybox (Debian's busybox-static) to set "
    "its limits inside the image: install it on this machine"
)
# prepare's answer for an image that left the cache before its job started.
EVICTED = "evicted"

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
            max_pull_bytes=settings.SWITCHYARD_IMAGE_MAX_PULL_MB << 20,
            skopeo=Skopeo(timeout_s=timeout),
            unpack_timeout_s=timeout,
        )
    return _CACHES[root]


def prepare(
    root: str, request: SubmitRequest, placement: Placement
) -> tuple[CachedImage | None, str]:
    """The job's image as it starts, pinned (pulled since its submission, pulls.py), or why
    it cannot start; (None, "") for a job without one, (None, EVICTED) when the image left
    the cache meanwhile (the job waits for a new pull). Never pulls: this runs under the
    root's lock."""
    spec = request.spec
    if not spec.image_digest:
        return None, ""
    if rank_count(spec, placement) > 1:
        return None, "a task in an image runs on one node for now (docs/containers.md)"
    if not host_busybox():
        return None, BUSYBOX_MISSING
    cache = image_cache(root)
    try:
        pin = cache.pin(spec.image_digest)
    except ImageError:
        return None, EVICTED
    config = pin.image.config
    # A live sandbox runs its agent, not the image's command (sessionplan.py).
    runs_own = spec.command is not None or spec.script is not None or spec.session_idle_s
    if not runs_own and not (config.entrypoint or config.cmd):
        pin.release()
        return None, (
            f"image {spec.image} has neither Entrypoint nor Cmd in its config, and the task "
            "gives no command: give it a command or a script"
        )
    _HELD[(root, request.key)] = pin
    return pin.image, ""


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
