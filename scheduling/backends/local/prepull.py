"""The local backend's pre-pulling and cache listing (docs/containers.md, "Pre-pulling"):
its nodes share one image cache, its root's, so a pre-pull for any of them is one pull there
and the listing names them all."""

from __future__ import annotations

from scheduling.backends.base import ImageCacheView, Prepulled
from scheduling.backends.images.prepull import cache_view, prepull
from scheduling.backends.local.images import image_cache
from scheduling.decisions.types import NodeView


class LocalImages:
    """Mixed into LocalBackend: `prepull` and `image_caches` of the Backend protocol."""

    root: str
    prepulls = True

    def nodes(self) -> list[NodeView]:
        raise NotImplementedError  # the backend's own

    def prepull(
        self, images: list[str], *, nodes: list[str], timeout_s: float
    ) -> dict[str, Prepulled]:
        return prepull(image_cache(str(self.root)), images, timeout_s=timeout_s)

    def image_caches(self) -> list[ImageCacheView]:
        names = sorted(n.name for n in self.nodes())
        return [cache_view(image_cache(str(self.root)), names)]
