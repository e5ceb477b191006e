"""The node side of container images: a registry client (skopeo) and the node's image cache
(docs/containers.md)."""

from scheduling.backends.images.cache import CachedImage, ImageCache, Pin
from scheduling.backends.images.layout import ImageConfig
from scheduling.backends.images.skopeo import (
    BadImage,
    ImageError,
    ImageNotFound,
    PullFailed,
    RegistryDenied,
    RegistryUnreachable,
    Skopeo,
)

__all__ = [
    "BadImage",
    "CachedImage",
    "ImageCache",
    "ImageConfig",
    "ImageError",
    "ImageNotFound",
    "Pin",
    "PullFailed",
    "RegistryDenied",
    "RegistryUnreachable",
    "Skopeo",
]
