"""What a submission asks registries (docs/containers.md, "At submission"): the manifest a tag
or digest names, each distinct reference asked once per submission, all of a submission's
questions within one deadline, and a tag's answer shared for a few seconds between
submissions.

A batch holds up to SWITCHYARD_BATCH_MAX_TASKS tasks and a workflow a thousand: asked one by
one, with the registry's timeout each, one request could hold a web worker for hours. Here
the tasks of one submission that name the same image cost one registry call, and once the
submission's deadline (SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S) has passed, the submission is
refused with a 503 on the field of the task it reached: nothing is stored, try again.

Only what submissions use of a manifest is kept, in memory and in the shared cache: its
digest, its layers' total size and, for an index, the digest of this platform's manifest. A
manifest over MAX_MANIFEST_BYTES is refused (400 on the field): an image's manifest is a few
KiB, and a registry serving megabytes per tag would fill the web workers and the cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import platform
import subprocess
import time
from collections.abc import Iterator
from contextvars import ContextVar

from django.conf import settings
from django.core.cache import cache

from portal.errors import ApplicationError
from scheduling.decisions.catalogue import layer_bytes, platform_manifest
from scheduling.decisions.images import DEFAULT_TAG, ImageRef, registry_is_local

_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "404")
_DENIED = ("unauthorized", "denied", "401", "403")

log = logging.getLogger(__name__)
MAX_MANIFEST_BYTES = 256 << 10
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}  # uname's names → OCI's
ARCH = _ARCHES.get(platform.machine(), platform.machine())


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest:
    """What a submission uses of a manifest: its digest (the sha256 of its bytes, as the
    registry computes it), the sum of its layers' sizes (None for an index) and, for an
    index, the digest of its manifest for linux/ARCH (None if it lists none)."""

    digest: str
    layer_bytes: int | None
    child: str | None

    @classmethod
    def of(cls, raw: bytes) -> Manifest:
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        data = data if isinstance(data, dict) else {}
        size = layer_bytes(data)
        child = platform_manifest(data, arch=ARCH) if size is None else None
        return cls("sha256:" + hashlib.sha256(raw).hexdigest(), size, child)


class SubmissionDeadline(ApplicationError):
    """The submission's registry questions took longer than its deadline: a 503 on the field
    of the task it reached, which a batch or a workflow raises at once (nothing is stored)."""


@dataclasses.dataclass(slots=True)
class _Lookups:
    deadline: float  # time.monotonic()
    # target -> what its manifest says, or the (message, status) it was refused with
    answers: dict[str, Manifest | tuple[str, int]] = dataclasses.field(default_factory=dict)


_current: ContextVar[_Lookups | None] = ContextVar("image_lookups", default=None)


@contextlib.contextmanager
def image_lookups() -> Iterator[None]:
    """One submission: within it each distinct reference is asked once, and every question
    shares one deadline. Nested, the outer submission's lookups are kept."""
    if _current.get() is not None:
        yield
        return
    limit = float(settings.SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S)
    token = _current.set(_Lookups(deadline=time.monotonic() + limit))
    try:
        yield
    finally:
        _current.reset(token)


def manifest(target: str, ref: ImageRef, *, field: str, got: str) -> Manifest:
    """What the manifest the registry serves for `target` (by tag or digest) says; or an
    ApplicationError naming `field`: 400 for what the registry does not have or refuses to
    show (or a manifest over MAX_MANIFEST_BYTES), 503 when it does not answer (or the
    submission's deadline passed)."""
    lookups = _current.get()
    if lookups is None:
        with image_lookups():
            return manifest(target, ref, field=field, got=got)
    known = lookups.answers.get(target)
    if isinstance(known, Manifest):
        return known
    if known is not None:
        message, status = known
        raise ApplicationError(message, field=field, got=got, status=status)
    key = _cache_key(target)
    shared = cache.get(key) if settings.SWITCHYARD_IMAGE_TAG_CACHE_S > 0 else None
    if isinstance(shared, Manifest):
        lookups.answers[target] = shared
        return shared
    try:
        facts = Manifest.of(_ask(target, ref, lookups.deadline, field=field, got=got))
    except SubmissionDeadline:
        raise
    except ApplicationError as exc:
        lookups.answers[target] = (exc.errors[0].message, exc.status)
        raise
    lookups.answers[target] = facts
    if settings.SWITCHYARD_IMAGE_TAG_CACHE_S > 0:
        cache.set(key, facts, timeout=settings.SWITCHYARD_IMAGE_TAG_CACHE_S)
    return facts


def _cache_key(target: str) -> str:
    # A new prefix: entries of the old one held whole manifests.
    return "image-manifest-facts:" + hashlib.sha256(target.encode()).hexdigest()


def _deadline_passed(field: str, got: str) -> SubmissionDeadline:
    limit = settings.SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S
    return SubmissionDeadline(
        f"the registries did not say what this submission's images name within {limit}s "
        "(all of its tasks together); nothing was stored, try again later",
        field=field,
        got=got,
        status=503,
    )


def _ask(target: str, ref: ImageRef, deadline: float, *, field: str, got: str) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise _deadline_passed(field, got)
    resolve_timeout = float(settings.SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S)
    timeout = min(resolve_timeout, left)
    tls = "false" if registry_is_local(ref.registry) else "true"
    argv = ["skopeo", "inspect", "--raw", f"--tls-verify={tls}", f"docker://{target}"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    except FileNotFoundError:
        raise ApplicationError(
            "this portal cannot ask registries what a tag names: skopeo is not installed",
            field=field,
            got=got,
            status=503,
        ) from None
    except subprocess.TimeoutExpired:
        if timeout < resolve_timeout:
            raise _deadline_passed(field, got) from None
        raise ApplicationError(
            f"registry {ref.registry} did not say what tag {ref.tag or DEFAULT_TAG} names "
            f"within {resolve_timeout:g}s; try again later",
            field=field,
            got=got,
            status=503,
        ) from None
    err = done.stderr.decode(errors="replace")
    if done.returncode == 0 and len(done.stdout) > MAX_MANIFEST_BYTES:
        raise ApplicationError(
            f"expected an image whose manifest is at most {MAX_MANIFEST_BYTES // 1024} KiB: "
            f"registry {ref.registry} served {len(done.stdout) // 1024} KiB for {target}",
            field=field,
            got=got,
        )
    if done.returncode == 0 and done.stdout.strip():
        return done.stdout
    low = err.lower()
    if any(mark in low for mark in _NOT_FOUND):
        what = (
            f"{target.partition('@')[2]} of {ref.repository}"
            if "@" in target
            else f"tag {ref.tag or DEFAULT_TAG} of {ref.repository}"
        )
        raise ApplicationError(
            f"expected an image that exists: {what} is not in registry {ref.registry}",
            field=field,
            got=got,
        )
    if any(mark in low for mark in _DENIED):
        raise ApplicationError(
            f"registry {ref.registry} refused to show {ref.by_tag} to this portal",
            field=field,
            got=got,
        )
    # Its answer goes to the log, never to the submitter: skopeo follows a registry's
    # redirects, and what a service of the site's own network answered is not theirs to read.
    log.warning("registry %s on %s: %s", ref.registry, ref.by_tag, err.strip()[-500:])
    raise ApplicationError(
        f"registry {ref.registry} could not be asked what {ref.by_tag} names; try again later",
        field=field,
        got=got,
        status=503,
    )
