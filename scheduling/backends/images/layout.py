"""Reading an OCI image layout (the one skopeo writes): the image's config — what `docker run`
honours — and the blobs an image needs, so that unused ones can be removed."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """What an image says about how to run it: `env` as `NAME=value` strings in its order,
    `workdir` ("" for /), `entrypoint` and `cmd` argv lists, `user` ("" for root)."""

    env: tuple[str, ...] = ()
    workdir: str = ""
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    user: str = ""

    @classmethod
    def from_oci(cls, config: dict[str, Any]) -> ImageConfig:
        """From an OCI image config blob (its `config` object; any of it may be missing)."""
        c = config.get("config") or {}
        return cls(
            env=tuple(c.get("Env") or ()),
            workdir=c.get("WorkingDir") or "",
            entrypoint=tuple(c.get("Entrypoint") or ()),
            cmd=tuple(c.get("Cmd") or ()),
            user=c.get("User") or "",
        )

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ImageConfig:
        return cls(
            env=tuple(data["env"]),
            workdir=data["workdir"],
            entrypoint=tuple(data["entrypoint"]),
            cmd=tuple(data["cmd"]),
            user=data["user"],
        )

    def as_json(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def blob_path(blobs: Path, digest: str) -> Path:
    algorithm, _, hexa = digest.partition(":")
    return blobs / algorithm / hexa


def _read(blobs: Path, digest: str) -> dict[str, Any]:
    return json.loads(blob_path(blobs, digest).read_bytes())


def manifest_of(layout: Path, blobs: Path) -> dict[str, Any]:
    """The image manifest the layout's index names (through an index if it names one)."""
    index = json.loads((layout / "index.json").read_text())
    descriptor = index["manifests"][0]
    while descriptor.get("mediaType") in _INDEX_TYPES:
        descriptor = _read(blobs, descriptor["digest"])["manifests"][0]
    return _read(blobs, descriptor["digest"])


def config_of(layout: Path, blobs: Path) -> ImageConfig:
    manifest = manifest_of(layout, blobs)
    return ImageConfig.from_oci(_read(blobs, manifest["config"]["digest"]))


def blobs_of(layout: Path, blobs: Path) -> set[str]:
    """Every blob digest the layout's images use: indexes, manifests, configs, layers (only
    indexes and manifests are read)."""
    index = json.loads((layout / "index.json").read_text())
    todo = list(index.get("manifests", []))
    used: set[str] = set()
    while todo:
        descriptor = todo.pop()
        digest = descriptor["digest"]
        if digest in used:
            continue
        used.add(digest)
        if not blob_path(blobs, digest).exists():
            continue
        if descriptor.get("mediaType") in _INDEX_TYPES:
            todo += _read(blobs, digest).get("manifests", [])
        else:
            manifest = _read(blobs, digest)
            used.add(manifest["config"]["digest"])
            used.update(layer["digest"] for layer in manifest.get("layers", []))
    return used


def layer_sizes(layout: Path, blobs: Path) -> dict[str, int]:
    """The image's layers and their compressed sizes (what a pull moves)."""
    return {
        layer["digest"]: int(layer.get("size", 0)) for layer in manifest_of(layout, blobs)["layers"]
    }
