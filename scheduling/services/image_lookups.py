"""What a submission asks registries (docs/containers.md, "At submission"): the manifest a tag
or digest names, each distinct reference asked once per submission, all of a submission's
questions within one deadline, and a tag's answer shared for a few seconds between
submissions.

A batch holds up to SWITCHYARD_BATCH_MAX_TASKS tasks and a workflow a thousand: asked one by
one, with the registry's timeout each, one request could hold a web worker for hours. Here
the tasks of one submission that name the same image cost one registry call, and once the
submission's deadline (SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S) has passed, the submission is
refused with a 503 on the field of the task it reached: nothing is stored, try again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import subprocess
import time
from collections.abc import Iterator
from contextvars import ContextVar

from django.conf import settings
from django.core.cache import cache

from portal.errors import ApplicationError
from scheduling.decisions.images import DEFAULT_TAG, ImageRef, registry_is_local

_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "404")
_DENIED = ("unauthorized", "denied", "401", "403")

log = logging.getLogger(__name__)


class SubmissionDeadline(ApplicationError):
    """The submission's registry questions took longer than its deadline: a 503 on the field
    of the task it reached, which a batch or a workflow raises at once (nothing is stored)."""


@dataclasses.dataclass(slots=True)
class _Lookups:
    deadline: float  # time.monotonic()
    # target -> the manifest's bytes, or the (message, status) it was refused with
    answers: dict[str, bytes | tuple[str, int]] = dataclasses.field(default_factory=dict)


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


def raw_manifest(target: str, ref: ImageRef, *, field: str, got: str) -> bytes:
    """The manifest the registry serves for `target` (by tag or digest), byte for byte; or an
    ApplicationError naming `field`: 400 for what the registry does not have or refuses to
    show, 503 when it does not answer (or the submission's deadline passed)."""
    lookups = _current.get()
    if lookups is None:
        with image_lookups():
            return raw_manifest(target, ref, field=field, got=got)
    known = lookups.answers.get(target)
    if isinstance(known, bytes):
        return known
    if known is not None:
        message, status = known
        raise ApplicationError(message, field=field, got=got, status=status)
    key = _cache_key(target)
    shared = cache.get(key) if settings.SWITCHYARD_IMAGE_TAG_CACHE_S > 0 else None
    if isinstance(shared, bytes):
        lookups.answers[target] = shared
        return shared
    try:
        manifest = _ask(target, ref, lookups.deadline, field=field, got=got)
    except SubmissionDeadline:
        raise
    except ApplicationError as exc:
        lookups.answers[target] = (exc.errors[0].message, exc.status)
        raise
    lookups.answers[target] = manifest
    if settings.SWITCHYARD_IMAGE_TAG_CACHE_S > 0:
        cache.set(key, manifest, timeout=settings.SWITCHYARD_IMAGE_TAG_CACHE_S)
    return manifest


def _cache_key(target: str) -> str:
    return "image-manifest:" + hashlib.sha256(target.encode()).hexdigest()


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
