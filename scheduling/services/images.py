"""A task's image at submission: allowed by the site and its image catalogue, its tag
resolved to the digest every attempt will run, and no larger than its pool allows
(docs/containers.md).

The registry is asked here, with a short timeout, because a tag names an image only now: a
task accepted today must run today's image tomorrow and on its retries, even after the tag
moved. `skopeo inspect --raw` gives the tag's manifest; its sha256 is the digest, as the
registry itself computes it. The node pulls by that digest (scheduling/backends/images/).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import platform
import subprocess

from django.conf import settings
from django.utils import timezone

from portal.errors import ApplicationError
from scheduling.decisions.catalogue import (
    Catalogue,
    catalogue_check,
    layer_bytes,
    platform_manifest,
    size_problem,
)
from scheduling.decisions.images import (
    DEFAULT_TAG,
    ImageRef,
    ImageRefError,
    image_allowed,
    registry_is_local,
)
from scheduling.models import Task, TaskEvent
from scheduling.spec import TaskSpec

# The backends that run a task's command in its image (the others refuse an image): the
# local backend, and Slurm, whose nodes pull it in their Prolog (docs/containers.md).
IMAGE_BACKENDS = frozenset(
    {"scheduling.backends.local.LocalBackend", "scheduling.backends.slurm.SlurmBackend"}
)
_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "404")
_DENIED = ("unauthorized", "denied", "401", "403")
_ARCHES = {"x86_64": "amd64", "aarch64": "arm64"}  # uname's names → OCI's

log = logging.getLogger(__name__)


def backend_runs_images(alias: str) -> bool:
    backend = settings.COMPUTE_BACKENDS.get(alias) or {}
    return backend.get("BACKEND") in IMAGE_BACKENDS


def task_image(
    spec: TaskSpec,
    *,
    pool: str,
    backend: str,
    task_type: str,
    catalogue: Catalogue,
    field: str = "image",
) -> tuple[TaskSpec, tuple[str, ...]]:
    """`spec` with its image named in full and pinned to a digest (`image_digest`), and the
    warnings to record on the task (a deprecated image); or an ApplicationError naming
    `field`: 400 for an image the site or its catalogue refuses, a tag that names nothing or
    an image over the pool's size limit, 503 when the registry does not answer.

    A spec without an image gets the catalogue's default image of its type, where the
    catalogue names one for its pool and the pool runs images; otherwise it stays as it is
    and runs on the pool's own software."""
    runs_images = backend_runs_images(backend)
    text, default = spec.image, None
    if text is None:
        default = catalogue.default_for(task_type, pool) if runs_images else None
        if default is None:
            return spec, ()
        text = default.default_reference
    try:
        ref = image_allowed(
            text,
            registries=settings.SWITCHYARD_IMAGE_REGISTRIES,
            default_registry=settings.SWITCHYARD_IMAGE_REGISTRY,
            pool=pool,
            runs_images=runs_images,
            field=field,
        )
        verdict = catalogue_check(
            ref,
            catalogue=catalogue,
            task_type=task_type,
            pool=pool,
            today=timezone.localdate(),
            field=field,
            got=text,
        )
    except ImageRefError as exc:
        message = exc.message
        if default is not None:
            message = f"the default image of {task_type} tasks, {text}, cannot run: {message}"
        raise ApplicationError(message, field=field, got=text) from None
    digest, manifest = ref.digest, None
    if digest is None or verdict.digest_of_tag:
        manifest = _raw_manifest(ref.by_tag, ref, field=field, got=text)
        named = "sha256:" + hashlib.sha256(manifest).hexdigest()
        if digest is not None and digest != named:
            raise ApplicationError(
                f"expected no digest, or the one tag {ref.tag} names now ({named}): the "
                f"catalogue allows tags of {ref.name}, not other digests",
                field=field,
                got=text,
            )
        digest = named
    if pool in catalogue.size_limits:
        size = _image_bytes(ref, digest, manifest, field=field, got=text)
        problem = size_problem(size, pool=pool, limits=catalogue.size_limits)
        if problem is not None:
            raise ApplicationError(problem, field=field, got=text)
    warnings = (verdict.warning,) if verdict.warning else ()
    return dataclasses.replace(spec, image=str(ref), image_digest=digest), warnings


def warning_events(task: Task, warnings: tuple[str, ...]) -> list[TaskEvent]:
    """An event on `task` per warning its submission gave (not yet saved): the task's page
    and `GET /api/v1/tasks/<id>/` show them under its events."""
    return [
        TaskEvent(
            task=task,
            at=task.submitted_at,
            from_state=task.state,
            to_state=task.state,
            message=f"warning: {w}",
        )
        for w in warnings
    ]


def _image_bytes(
    ref: ImageRef, digest: str, manifest: bytes | None, *, field: str, got: str
) -> int:
    """The image's compressed size, from its manifest's layer sizes (an index: from the
    manifest of this machine's platform)."""
    if manifest is None:
        manifest = _raw_manifest(f"{ref.name}@{digest}", ref, field=field, got=got)
    data = _json(manifest)
    size = layer_bytes(data)
    if size is not None:
        return size
    arch = _ARCHES.get(platform.machine(), platform.machine())
    child = platform_manifest(data, arch=arch)
    if child is None:
        raise ApplicationError(
            f"expected an image for linux/{arch}: the index {ref.name} names lists none",
            field=field,
            got=got,
        )
    size = layer_bytes(_json(_raw_manifest(f"{ref.name}@{child}", ref, field=field, got=got)))
    return size or 0


def _json(raw: bytes) -> dict:
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def resolve_digest(ref: ImageRef, *, field: str, got: str) -> str:
    """The digest `ref`'s tag names now, as its registry says."""
    manifest = _raw_manifest(ref.by_tag, ref, field=field, got=got)
    return "sha256:" + hashlib.sha256(manifest).hexdigest()


def _raw_manifest(target: str, ref: ImageRef, *, field: str, got: str) -> bytes:
    """The manifest the registry serves for `target` (by tag or digest), byte for byte."""
    tls = "false" if registry_is_local(ref.registry) else "true"
    timeout = settings.SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S
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
        raise ApplicationError(
            f"registry {ref.registry} did not say what tag {ref.tag or DEFAULT_TAG} names "
            f"within {timeout}s; try again later",
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
