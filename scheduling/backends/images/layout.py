"""Reading an OCI image layout (the one skopeo writes): the image's config — what `docker run`
honours — and the blobs an image needs, so that unused ones can be removed."""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from scheduling.descriptor.limits import env_reserved

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
    def from_oci(cls, config: Any) -> ImageConfig:
        """From an OCI image config blob (its `config` object; any of it may be missing).
        BadImageConfig says which field is not what a job can run with (see `_checked`)."""
        c = config.get("config") if isinstance(config, dict) else config
        if c is None:
            c = {}
        if not isinstance(c, dict):
            raise BadImageConfig("config", "an object", c)
        return cls(
            env=_env(c.get("Env")),
            workdir=_workdir(c.get("WorkingDir")),
            entrypoint=_argv("Entrypoint", c.get("Entrypoint")),
            cmd=_argv("Cmd", c.get("Cmd")),
            user=_string("User", c.get("User")),
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


class BadImageConfig(ValueError):
    """The image's config says something no job can be run with: `field` (the config's own
    name), what was expected, what it holds."""

    def __init__(self, field: str, expected: str, got: object) -> None:
        shown = repr(got)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        super().__init__(f"the image's config {field}: expected {expected}, got {shown}")
        self.field = field


# What one image's config may hold: its Env, Entrypoint and Cmd travel in every launch plan.
MAX_CONFIG_ITEMS = 256
MAX_CONFIG_CHARS = 65536
_IMAGE_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Reserved for descriptors, but an image's own PATH and LD_LIBRARY_PATH name its own folders,
# as Docker images' do (the CUDA images set both). They act only inside the sandbox, where the
# image is the root: the image's Env never reaches a program outside it (docs/containers.md).
_IMAGE_MAY_SET = frozenset({"PATH", "LD_LIBRARY_PATH"})


def _strings(field: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadImageConfig(field, "a list of strings or null", value)
    if len(value) > MAX_CONFIG_ITEMS or sum(len(v) for v in value) > MAX_CONFIG_CHARS:
        raise BadImageConfig(
            field, f"at most {MAX_CONFIG_ITEMS} strings of {MAX_CONFIG_CHARS} characters", value
        )
    for v in value:
        if "\0" in v:
            raise BadImageConfig(field, "strings without NUL", v)
    return tuple(value)


def _argv(field: str, value: Any) -> tuple[str, ...]:
    argv = _strings(field, value)
    if argv and not argv[0]:
        raise BadImageConfig(field, "a program's name first, not an empty string", value)
    return argv


def _env(value: Any) -> tuple[str, ...]:
    """The image's Env: NAME=value pairs, none of a name a descriptor may not set either (the
    dynamic loader's LD_*, the portal's SWITCHYARD_*, …: docs/descriptor.md), except PATH."""
    pairs = _strings("Env", value)
    for pair in pairs:
        name, sep, _ = pair.partition("=")
        if not sep or not _IMAGE_ENV_NAME_RE.match(name):
            raise BadImageConfig("Env", "NAME=value with NAME of letters, digits and _", pair)
        reason = None if name in _IMAGE_MAY_SET else env_reserved(name)
        if reason is not None:
            raise BadImageConfig("Env", f"no {name}: it is reserved ({reason})", pair)
    return pairs


def _workdir(value: Any) -> str:
    """The image's WorkingDir, normalised: absolute, without .. (it is looked up inside the
    image's root, never above it), "" for none."""
    text = _string("WorkingDir", value)
    if not text:
        return ""
    if not text.startswith("/") or "\0" in text or len(text) > 4096:
        raise BadImageConfig("WorkingDir", "an absolute path such as /work", text)
    if ".." in text.split("/"):
        raise BadImageConfig("WorkingDir", "a path without .. in it", text)
    return "/" + posixpath.normpath(text).lstrip("/")


def _string(field: str, value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadImageConfig(field, "a string or null", value)
    return value


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
