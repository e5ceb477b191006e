"""A node's image cache read from outside, changing nothing (docs/containers.md,
"Pre-pulling"): what the portal lists of a Slurm node's cache that it can see (the localhost
cluster's `<state>/images/<node>`). ImageCache itself makes its folders, sets their modes
and sweeps its leftovers as it opens, which only the cache's own account may do."""

from __future__ import annotations

from pathlib import Path

from scheduling.backends.images.cache import ImageCache


class ReadOnlyCache(ImageCache):
    """The reading half of ImageCache over `root`: get, cached, size and listing only (its
    other methods write, which the cache's account alone does)."""

    def __init__(self, root: str | Path) -> None:  # noqa: D107 - no super(): it would write
        self.root = Path(root)
        self.blobs = self.root / "blobs"
        self.layouts = self.root / "layouts"
        self.images = self.root / "images"
        self.locks = self.root / "locks"
        self.tmp = self.root / "tmp"

    def readable(self) -> bool:
        """Whether this looks like a cache one can list from here."""
        return self.images.is_dir() and (self.blobs / "sha256").is_dir()
