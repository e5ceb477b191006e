"""Container image references as plain values: `NAME[:TAG][@sha256:DIGEST]` read as Docker
reads them, with the registry a site defaults to in place of Docker Hub (docs/containers.md).

Pure: no Django, no network. Which registry answers, and which digest a tag names, is the node
side's business; this only says what a reference means, or why it is not one.

The grammar is the one of Docker's distribution/reference package:

- the first `/`-separated component is a registry host when it holds a `.` or a `:` (a port),
  is `localhost`, or has an upper-case letter; otherwise the whole name is a path on the
  default registry (`demo/tiny` → `<default>/demo/tiny`, `python` → `<default>/python`);
- path components are lower-case letters and digits joined by one `.`, one or two `_`, or
  any number of `-`; the name is at most 255 characters;
- a tag is a letter, digit or `_` then up to 127 of those, `.` and `-`; no tag and no
  digest means `latest`;
- a digest is `sha256:` and 64 lower-case hex digits; with both a tag and a digest the
  digest decides (the tag is kept for people to read).

Docker's `docker.io` default and its `library/` prefix for one-component names apply only
when the site's default registry is `docker.io`: a site that runs its own registry names its
images as it likes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
DEFAULT_TAG = "latest"
MAX_NAME = 255  # the repository name with its host, as Docker counts it
MAX_REFERENCE = 512

FORM = "NAME[:TAG][@sha256:DIGEST], e.g. registry.example.org/hpc/gromacs:2024.1"

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_COMPONENT_RE = re.compile(rf"^{_COMPONENT}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_HOST_LABEL = r"(?:[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9-]*[A-Za-z0-9])"
_HOST_RE = re.compile(
    rf"^(?:{_HOST_LABEL}(?:\.{_HOST_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{{1,5}})?$"
)


class ImageRefError(ValueError):
    """Not an image reference: `field` (the descriptor's), what was expected, what came."""

    def __init__(self, field: str, message: str, got: object = None) -> None:
        super().__init__(f"{field}: {message}" + ("" if got is None else f", got {got!r}"))
        self.field, self.message, self.got = field, message, got


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A parsed reference: `registry` host[:port], `repository` path on it, and a `tag`, a
    `digest` or both (the digest decides what runs)."""

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        """`registry/repository`: what a tag or digest is appended to."""
        return f"{self.registry}/{self.repository}"

    @property
    def pinned(self) -> bool:
        """True when the reference names one image for good (a digest)."""
        return self.digest is not None

    def with_digest(self, digest: str) -> ImageRef:
        """The same reference pinned to `digest` (what a tag resolved to at submit)."""
        if not _DIGEST_RE.match(digest):
            raise ImageRefError("digest", "expected sha256: and 64 lower-case hex digits", digest)
        return ImageRef(self.registry, self.repository, self.tag, digest)

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text

    @property
    def by_digest(self) -> str:
        """`registry/repository@digest`: how a node pulls it (a pinned reference only)."""
        if self.digest is None:
            raise ValueError(f"{self} is not pinned to a digest")
        return f"{self.name}@{self.digest}"

    @property
    def by_tag(self) -> str:
        """`registry/repository:tag` (`latest` when none was given): what a tag resolves from."""
        return f"{self.name}:{self.tag or DEFAULT_TAG}"


def _is_host(component: str) -> bool:
    # Docker's splitDockerDomain: a dot, a port, localhost, or an upper-case letter.
    return (
        "." in component
        or ":" in component
        or component == "localhost"
        or component.lower() != component
    )


def parse_image_ref(text: object, *, default_registry: str, field: str = "image") -> ImageRef:
    """`text` as an ImageRef, its registry `default_registry` when it names none; an
    ImageRefError naming `field` says what is wrong."""
    if not isinstance(text, str):
        raise ImageRefError(field, f"expected a string {FORM}", text)
    if not text or text != text.strip():
        raise ImageRefError(field, f"expected {FORM} without spaces around it", text)
    if len(text) > MAX_REFERENCE:
        raise ImageRefError(field, f"expected at most {MAX_REFERENCE} characters", text)
    if not _HOST_RE.match(default_registry) or not _is_host(default_registry.split("/")[0]):
        # A name without a dot, a port or `localhost` (`registry`) would read, in a full
        # reference (`registry/team/x`), as the first part of a repository on the default
        # host: the node, which reads the stored reference, would look for it elsewhere.
        raise ImageRefError(
            "default_registry",
            "expected a registry host[:port] with a dot or a port, or localhost, such as "
            "registry.example.org or registry:5000",
            default_registry,
        )

    rest, digest = text, None
    if "@" in rest:
        rest, _, digest = rest.partition("@")
        if not _DIGEST_RE.match(digest):
            raise ImageRefError(
                field, "expected the digest after @ as sha256: and 64 lower-case hex digits", text
            )
    tag = None
    # A tag's colon comes after the last slash (a colon before it is a registry's port).
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG_RE.match(tag):
            raise ImageRefError(
                field,
                "expected a tag of letters, digits, _ . - (at most 128, not starting with . or -)",
                text,
            )
    if not rest:
        raise ImageRefError(field, f"expected a name before the tag or digest: {FORM}", text)

    first, sep, path = rest.partition("/")
    if sep and _is_host(first):
        registry = first
        if not _HOST_RE.match(registry):
            raise ImageRefError(field, "expected a registry host[:port] before the first /", text)
    else:
        registry, path = default_registry, rest
    for component in path.split("/"):
        if not _COMPONENT_RE.match(component):
            raise ImageRefError(
                field,
                "expected name components of lower-case letters and digits, joined by . _ __"
                f" or - (got component {component!r})",
                text,
            )
    if registry == DOCKER_HUB and "/" not in path:
        path = f"library/{path}"
    if len(f"{registry}/{path}") > MAX_NAME:
        raise ImageRefError(field, f"expected a name of at most {MAX_NAME} characters", text)
    return ImageRef(registry=registry, repository=path, tag=tag, digest=digest)


def registry_is_local(registry: str) -> bool:
    """True for a registry on this machine's loopback, which Docker lets speak plain HTTP;
    every other registry must speak HTTPS unless a site lists it as insecure."""
    host = registry.rsplit(":", 1)[0] if not registry.endswith("]") else registry
    host = host.strip("[]").lower()
    return host == "localhost" or host.startswith("127.") or host == "::1"


def image_allowed(
    text: object,
    *,
    registries: tuple[str, ...] | list[str],
    default_registry: str,
    pool: str,
    runs_images: bool,
    field: str = "image",
) -> ImageRef:
    """The reference a task may run, or an ImageRefError naming `field`: the site must allow
    a registry at all, the reference must be one, its registry one of `registries`, and the
    task's pool (`pool`) must run images (`runs_images`: its backend does)."""
    allowed = tuple(registries)
    if not allowed:
        raise ImageRefError(
            field,
            "expected no image: this site has no image registry configured "
            "(SWITCHYARD_IMAGE_REGISTRIES, docs/containers.md)",
            text,
        )
    ref = parse_image_ref(text, default_registry=default_registry or allowed[0], field=field)
    if ref.registry not in allowed:
        raise ImageRefError(
            field,
            f"expected an image from {', '.join(allowed)} (the registries this site allows), "
            f"not from {ref.registry}",
            text,
        )
    if not runs_images:
        raise ImageRefError(
            field,
            f"expected no image: pool {pool} does not run containers yet; remove it to run "
            "on the pool's own software, or send the task to a pool of the local backend",
            text,
        )
    return ref


def container_argv(
    entrypoint: tuple[str, ...] | list[str],
    cmd: tuple[str, ...] | list[str],
    command: tuple[str, ...] | list[str] | None,
) -> tuple[str, ...]:
    """What runs in an image, as `docker run IMAGE [COMMAND...]` decides: the image's
    Entrypoint followed by the task's command, or by the image's Cmd when the task gives
    none. ValueError when that is nothing at all."""
    argv = (*entrypoint, *(cmd if command is None else command))
    if not argv:
        raise ValueError("the image has no Entrypoint or Cmd, and the task gives no command")
    return argv


def container_env(
    image_env: tuple[str, ...] | list[str], task_env: tuple[tuple[str, str], ...]
) -> tuple[tuple[str, str], ...]:
    """The environment in an image: the image's `NAME=value` pairs in their order, a name
    the task sets taking the task's value in place, then the task's other names in order."""
    task = dict(task_env)
    merged: dict[str, str] = {}
    for pair in image_env:
        name, sep, value = pair.partition("=")
        if name and sep:
            merged[name] = task.pop(name, value)
    merged.update(task)
    return tuple(merged.items())


def container_workdir(image_workdir: str) -> str:
    """Where a command in the image starts when the task names no folder: its WorkingDir, or
    `/` as Docker does when the image names none."""
    return image_workdir or "/"
