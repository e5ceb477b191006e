"""A task's image at submission: allowed by the site and its image catalogue, its tag
resolved to the digest every attempt will run, and no larger than its pool allows
(docs/containers.md).

The registry is asked here (scheduling/services/image_lookups.py), with a short timeout, because a tag names an image only now: a
task accepted today must run today's image tomorrow and on its retries, even after the tag
moved. `skopeo inspect --raw` gives the tag's manifest; its sha256 is the digest, as the
registry itself computes it. The node pulls by that digest (scheduling/backends/images/).
"""

from __future__ import annotations

import dataclasses

from django.conf import settings
from django.utils import timezone

from portal.errors import ApplicationError
from scheduling.decisions.catalogue import Catalogue, catalogue_check, size_problem
from scheduling.decisions.images import ImageRef, ImageRefError, image_allowed
from scheduling.models import Task, TaskEvent
from scheduling.services.image_lookups import ARCH, Manifest, image_lookups, manifest
from scheduling.spec import TaskSpec

# The backends that run a task's command in its image (the others refuse an image): the
# local backend, and Slurm, whose nodes pull it in their Prolog (docs/containers.md).
IMAGE_BACKENDS = frozenset(
    {"scheduling.backends.local.LocalBackend", "scheduling.backends.slurm.SlurmBackend"}
)


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
    and runs on the pool's own software.

    Within a submission (image_lookups), a reference another task of it named costs no
    registry call, and all of them share the submission's deadline."""
    with image_lookups():
        return _task_image(
            spec, pool=pool, backend=backend, task_type=task_type, catalogue=catalogue, field=field
        )


def _task_image(
    spec: TaskSpec, *, pool: str, backend: str, task_type: str, catalogue: Catalogue, field: str
) -> tuple[TaskSpec, tuple[str, ...]]:
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
    digest, named_by_tag = ref.digest, None
    if digest is None or verdict.digest_of_tag:
        named_by_tag = manifest(ref.by_tag, ref, field=field, got=text)
        named = named_by_tag.digest
        if digest is not None and digest != named:
            raise ApplicationError(
                f"expected no digest, or the one tag {ref.tag} names now ({named}): the "
                f"catalogue allows tags of {ref.name}, not other digests",
                field=field,
                got=text,
            )
        digest = named
    if pool in catalogue.size_limits:
        size = _image_bytes(ref, digest, named_by_tag, field=field, got=text)
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
    ref: ImageRef, digest: str, facts: Manifest | None, *, field: str, got: str
) -> int:
    """The image's compressed size, from its manifest's layer sizes (an index: from the
    manifest of this machine's platform)."""
    if facts is None:
        facts = manifest(f"{ref.name}@{digest}", ref, field=field, got=got)
    if facts.layer_bytes is not None:
        return facts.layer_bytes
    if facts.child is None:
        raise ApplicationError(
            f"expected an image for linux/{ARCH}: the index {ref.name} names lists none",
            field=field,
            got=got,
        )
    return manifest(f"{ref.name}@{facts.child}", ref, field=field, got=got).layer_bytes or 0


def resolve_digest(ref: ImageRef, *, field: str, got: str) -> str:
    """The digest `ref`'s tag names now, as its registry says."""
    return manifest(ref.by_tag, ref, field=field, got=got).digest
