"""Pre-pulling (docs/containers.md, "Pre-pulling"): a pool's warm images pulled into a node's
cache ahead of use, with the cache's own pull (one pull per image however many ask), waiting
at most so long. A pull still running at the deadline goes on: the next job, or the next
pre-pull, finds the image there."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait

from scheduling.backends.base import CachedImageView, ImageCacheView, Prepulled
from scheduling.backends.images.cache import CachedImage, ImageCache
from scheduling.backends.images.skopeo import ImageError
from scheduling.decisions.images import ImageRefError, parse_image_ref

WORKERS = 4


def _one(cache: ImageCache, text: str) -> Prepulled:
    try:
        ref = parse_image_ref(text, default_registry="localhost")
    except ImageRefError as exc:
        return Prepulled(False, f"not an image reference: {exc}")
    try:
        ref = cache.resolve(ref)  # the tag's digest now: a moved tag pulls the new image
        assert ref.digest is not None
        before = cache.get(ref.digest)
        image = before or cache.pull(ref)
    except ImageError as exc:
        return Prepulled(False, f"pulling failed: {exc.reason}")
    if before is None:
        return Prepulled(
            True,
            f"pulled {image.digest[:19]} in {image.pull_seconds:.1f}s "
            f"({image.pull_bytes / 1e6:.1f} MB)",
        )
    return Prepulled(True, f"cached ({image.digest[:19]})")


def prepull(
    cache: ImageCache, references: Sequence[str], *, timeout_s: float
) -> dict[str, Prepulled]:
    """Each reference (in full) pulled into `cache` unless there, at most `timeout_s` for all."""
    if not references:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(WORKERS, len(references)))
    futures: dict[str, Future[Prepulled]] = {r: pool.submit(_one, cache, r) for r in references}
    wait(futures.values(), timeout=max(0.0, timeout_s))
    pool.shutdown(wait=False)
    out = {}
    for ref, future in futures.items():
        if future.done():
            exc = future.exception()
            out[ref] = future.result() if exc is None else Prepulled(False, f"failed: {exc}")
        else:
            out[ref] = Prepulled(False, f"still pulling after {timeout_s:.0f}s")
    return out


def _view(image: CachedImage) -> CachedImageView:
    return CachedImageView(
        reference=image.reference,
        digest=image.digest,
        bytes=image.rootfs_bytes,
        pull_bytes=image.pull_bytes,
        last_used=image.last_used,
    )


def cache_view(cache: ImageCache, nodes: Sequence[str]) -> ImageCacheView:
    """What `cache` holds, for the nodes it serves."""
    images, size, moved, pulls = cache.listing()
    return ImageCacheView(
        nodes=tuple(nodes),
        images=tuple(_view(i) for i in images),
        cache_bytes=size,
        pulled_bytes=moved,
        pulls=pulls,
    )
