"""The site's image catalogue as plain values, and what it says of a task's image
(docs/containers.md, "Catalogue").

Pure: no Django, no network, no clock (`today` comes in). The catalogue lists the registries
a platform admin allows, and images on them: a repository with the tags allowed (none listed:
any tag), its workload family, the pools and task types that may use it (none listed: every
one), the task types it is the default image of, and its deprecation. A registry may allow
any image of its own (`any_image`); otherwise only the images listed run. An empty catalogue
allows no image at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date

from scheduling.decisions.images import ImageRef, ImageRefError, parse_image_ref

FAMILIES = ("hpc-toolchain", "ai-training", "ai-inference", "agent-runtime", "sandbox-base")
ACTIVE, DEPRECATED, RETIRED = "active", "deprecated", "retired"
STATES = (ACTIVE, DEPRECATED, RETIRED)
_SHOWN = 8  # images named in a refusal, at most


@dataclass(frozen=True, slots=True)
class RegistryEntry:
    """A registry the catalogue allows; `any_image`: every image on it, listed or not."""

    host: str
    any_image: bool = False


@dataclass(frozen=True, slots=True)
class ImageEntry:
    """An image of the catalogue: `repository` on `registry`, the `tags` allowed (empty: any)."""

    registry: str
    repository: str
    family: str
    tags: tuple[str, ...] = ()
    pools: tuple[str, ...] = ()  # empty: every pool
    task_types: tuple[str, ...] = ()  # empty: every type
    default_for: tuple[str, ...] = ()  # the task types it is the default image of
    state: str = ACTIVE
    retire_on: date | None = None  # a deprecated image is refused from this day on
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @property
    def shown(self) -> str:
        """`name:1|2`, or `name (any tag)`: what a refusal lists."""
        return f"{self.name}:{'|'.join(self.tags)}" if self.tags else f"{self.name} (any tag)"

    @property
    def default_reference(self) -> str:
        """What a task of a type it is the default of runs: its one tag."""
        return f"{self.name}:{self.tags[0]}"

    def retired(self, today: date) -> bool:
        return self.state == RETIRED or (
            self.state == DEPRECATED and self.retire_on is not None and today >= self.retire_on
        )

    def deprecated(self, today: date) -> bool:
        return self.state == DEPRECATED and not self.retired(today)

    def for_type(self, task_type: str) -> bool:
        return not self.task_types or task_type in self.task_types

    def for_pool(self, pool: str) -> bool:
        return not self.pools or pool in self.pools


@dataclass(frozen=True, slots=True)
class Catalogue:
    registries: tuple[RegistryEntry, ...] = ()
    images: tuple[ImageEntry, ...] = ()
    # pool → the largest image (compressed layer bytes) its tasks may run; absent: no limit.
    size_limits: Mapping[str, int] = field(default_factory=dict)

    def registry(self, host: str) -> RegistryEntry | None:
        return next((r for r in self.registries if r.host == host), None)

    def entries(self, ref: ImageRef) -> list[ImageEntry]:
        return [
            e for e in self.images if e.registry == ref.registry and e.repository == ref.repository
        ]

    def default_for(self, task_type: str, pool: str) -> ImageEntry | None:
        """The image a task of `task_type` on `pool` gets when it names none, if any."""
        return next(
            (e for e in self.images if task_type in e.default_for and e.for_pool(pool)), None
        )


@dataclass(frozen=True, slots=True)
class Verdict:
    """An image the catalogue allows: its entry (None: its registry allows any image), a
    warning for the researcher (a deprecation), and whether the reference's digest must be
    the one its tag names now (a tag-listed entry and a reference with a digest)."""

    entry: ImageEntry | None
    warning: str | None = None
    digest_of_tag: bool = False


def usable(catalogue: Catalogue, task_type: str, pool: str, today: date) -> list[str]:
    """What a task of `task_type` on `pool` may name, for a refusal to say."""
    names = [
        e.shown + (" (deprecated)" if e.deprecated(today) else "")
        for e in catalogue.images
        if e.for_type(task_type) and e.for_pool(pool) and not e.retired(today)
    ]
    names += [f"any image from {r.host}" for r in catalogue.registries if r.any_image]
    return names


def _allowed(catalogue: Catalogue, task_type: str, pool: str, today: date) -> str:
    names = usable(catalogue, task_type, pool, today)
    if not names:
        return f"no image is allowed for {task_type} tasks on pool {pool}"
    more = f" and {len(names) - _SHOWN} more (GET /api/v1/images/)" if len(names) > _SHOWN else ""
    return f"allowed for {task_type} tasks on pool {pool}: {', '.join(names[:_SHOWN])}{more}"


def catalogue_check(
    ref: ImageRef,
    *,
    catalogue: Catalogue,
    task_type: str,
    pool: str,
    today: date,
    field: str = "image",
    got: object = None,
) -> Verdict:
    """Whether the catalogue lets a task of `task_type` on `pool` run `ref`; an ImageRefError
    naming `field` says why not and what is allowed."""
    got = str(ref) if got is None else got

    def refuse(message: str) -> ImageRefError:
        return ImageRefError(
            field, f"{message}; {_allowed(catalogue, task_type, pool, today)}", got
        )

    if not catalogue.registries:
        raise ImageRefError(
            field,
            "expected no image: this site's image catalogue allows no registry yet "
            "(a platform admin adds them, docs/containers.md)",
            got,
        )
    registry = catalogue.registry(ref.registry)
    if registry is None:
        hosts = ", ".join(r.host for r in catalogue.registries)
        raise refuse(
            f"expected an image from {hosts} (the registries of this site's image catalogue), "
            f"not from {ref.registry}"
        )
    entries = catalogue.entries(ref)
    entry = next((e for e in entries if ref.tag is not None and ref.tag in e.tags), None)
    entry = entry or next((e for e in entries if not e.tags), None)
    if entry is None:
        if registry.any_image:
            return Verdict(None)
        if entries:
            tags = sorted({t for e in entries for t in e.tags})
            wanted = f"tag {ref.tag}" if ref.tag else "a digest without a tag"
            raise refuse(
                f"expected a tag of {ref.name} the catalogue lists ({', '.join(tags)}), not {wanted}"
            )
        raise refuse(f"expected an image of this site's catalogue; {ref.name} is not in it")
    if entry.retired(today):
        when = (
            f" on {entry.retire_on.isoformat()}"
            if entry.retire_on and entry.state != RETIRED
            else ""
        )
        why = f" ({entry.note})" if entry.note else ""
        raise refuse(f"expected an image in service: {entry.shown} was retired{when}{why}")
    if not entry.for_type(task_type):
        raise refuse(
            f"expected an image for {task_type} tasks: {entry.shown} is for {', '.join(entry.task_types)} tasks"
        )
    if not entry.for_pool(pool):
        raise refuse(
            f"expected an image pool {pool} may run: {entry.shown} is for pool(s) {', '.join(entry.pools)}"
        )
    warning = None
    if entry.deprecated(today):
        until = f", refused from {entry.retire_on.isoformat()}" if entry.retire_on else ""
        why = f": {entry.note}" if entry.note else ""
        warning = f"image {entry.shown} is deprecated{until}{why}"
    return Verdict(entry, warning, digest_of_tag=bool(entry.tags) and ref.digest is not None)


def size_problem(size: int, *, pool: str, limits: Mapping[str, int]) -> str | None:
    """Why an image of `size` compressed bytes may not run on `pool`, or None."""
    limit = limits.get(pool)
    if limit is None or size <= limit:
        return None
    return (
        f"expected an image of at most {limit:,} bytes on pool {pool} (its layers, compressed); "
        f"this one is {size:,}"
    )


def layer_bytes(manifest: Mapping[str, object]) -> int | None:
    """The sum of an image manifest's layer sizes (compressed, as the registry stores them);
    None for an index (a manifest list), whose platform's manifest says it."""
    layers = manifest.get("layers")
    if not isinstance(layers, list):
        return None
    return sum(int(layer.get("size", 0)) for layer in layers if isinstance(layer, dict))


def platform_manifest(index: Mapping[str, object], *, arch: str, os: str = "linux") -> str | None:
    """The digest of an index's manifest for `os`/`arch`, or None when it has none."""
    items = index.get("manifests")
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        platform = item.get("platform") or {}
        if platform.get("os") == os and platform.get("architecture") == arch:
            return str(item.get("digest"))
    return None


# --- What an admin may write (the models' clean() asks these) --------------------------------


def repository_problem(registry: str, repository: str) -> str | None:
    """Why `repository` is not a repository path on `registry` (no tag, no digest), or None."""
    try:
        ref = parse_image_ref(f"{registry}/{repository}", default_registry=registry)
    except ImageRefError as exc:
        return exc.message
    if ref.registry != registry or ref.repository != repository or ref.tag or ref.digest:
        return "expected a repository path such as team/tool, without a host, tag or digest"
    return None


def host_problem(host: str) -> str | None:
    """Why `host` is not a registry host[:port], or None."""
    try:
        parse_image_ref("x", default_registry=host)
    except ImageRefError:
        return (
            "expected a registry host[:port] with a dot or a port, or localhost, such as "
            "registry.example.org or 127.0.0.1:15000 (a reference reads a bare name such as "
            "registry as the start of a repository path)"
        )
    return None


def tags_problem(tags: object) -> str | None:
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        return "expected a list of tags (empty: any tag)"
    if len(set(tags)) != len(tags):
        return "expected each tag once"
    for tag in tags:
        try:
            parse_image_ref(f"x:{tag}", default_registry="localhost")
        except ImageRefError:
            return (
                f"expected tags of letters, digits, _ . - (not starting with . or -), got {tag!r}"
            )
    return None


def types_problem(types: object, known: Iterable[str]) -> str | None:
    known = tuple(known)
    if not isinstance(types, list) or any(t not in known for t in types):
        return f"expected a list of task types of {', '.join(known)}, got {types!r}"
    if len(set(types)) != len(types):
        return "expected each task type once"
    return None


def entry_problem(entry: ImageEntry, others: Iterable[ImageEntry]) -> tuple[str, str] | None:
    """(field, why) when `entry` does not fit beside the catalogue's `others`, or None."""
    if entry.default_for:
        if len(entry.tags) != 1:
            return "tags", "expected one tag on a default image: the one tasks get"
        if entry.state == RETIRED:
            return "default_for", "expected no default on a retired image"
        if entry.task_types and set(entry.default_for) - set(entry.task_types):
            return "default_for", "expected task types the image is for (task_types)"
    if entry.retire_on is not None and entry.state != DEPRECATED:
        return "retire_on", "expected a retire date only on a deprecated image"
    for other in others:
        if other.registry == entry.registry and other.repository == entry.repository:
            shared = set(other.tags) & set(entry.tags)
            if shared or (not other.tags and not entry.tags):
                which = ", ".join(sorted(shared)) if shared else "any tag"
                return "tags", f"{other.shown} already lists {which} of {entry.name}"
        claimed = set(other.default_for) & set(entry.default_for)
        if claimed:
            return "default_for", (
                f"{other.shown} is already the default image of {', '.join(sorted(claimed))} tasks"
            )
    return None
