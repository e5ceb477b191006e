"""A task's image at submission: allowed, and its tag resolved to the digest every attempt
will run (docs/containers.md).

The registry is asked here, with a short timeout, because a tag names an image only now: a
task accepted today must run today's image tomorrow and on its retries, even after the tag
moved. `skopeo inspect --raw` gives the tag's manifest; its sha256 is the digest, as the
registry itself computes it. The node pulls by that digest (scheduling/backends/images/).
"""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess

from django.conf import settings

from portal.errors import ApplicationError
from scheduling.decisions.images import (
    DEFAULT_TAG,
    ImageRef,
    ImageRefError,
    image_allowed,
    registry_is_local,
)
from scheduling.spec import TaskSpec

# The backends that run a task's command in its image (the others refuse an image).
IMAGE_BACKENDS = frozenset({"scheduling.backends.local.LocalBackend"})
_NOT_FOUND = ("manifest unknown", "name unknown", "not found", "404")
_DENIED = ("unauthorized", "denied", "401", "403")


def backend_runs_images(alias: str) -> bool:
    backend = settings.COMPUTE_BACKENDS.get(alias) or {}
    return backend.get("BACKEND") in IMAGE_BACKENDS


def task_image(spec: TaskSpec, *, pool: str, backend: str, field: str = "image") -> TaskSpec:
    """`spec` with its image named in full and pinned to a digest (`image_digest`), or an
    ApplicationError naming `field`: 400 for an image the site refuses or a tag that names
    nothing, 503 when the registry does not answer."""
    if spec.image is None:
        return spec
    try:
        ref = image_allowed(
            spec.image,
            registries=settings.SWITCHYARD_IMAGE_REGISTRIES,
            default_registry=settings.SWITCHYARD_IMAGE_REGISTRY,
            pool=pool,
            runs_images=backend_runs_images(backend),
            field=field,
        )
    except ImageRefError as exc:
        raise ApplicationError(exc.message, field=field, got=spec.image) from None
    digest = ref.digest or resolve_digest(ref, field=field, got=spec.image)
    return dataclasses.replace(spec, image=str(ref), image_digest=digest)


def resolve_digest(ref: ImageRef, *, field: str, got: str) -> str:
    """The digest `ref`'s tag names now, as its registry says."""
    tls = "false" if registry_is_local(ref.registry) else "true"
    timeout = settings.SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S
    argv = ["skopeo", "inspect", "--raw", f"--tls-verify={tls}", f"docker://{ref.by_tag}"]
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
    words = err.strip().splitlines()[-1:] or [""]
    if done.returncode == 0 and done.stdout.strip():
        return "sha256:" + hashlib.sha256(done.stdout).hexdigest()
    low = err.lower()
    if any(mark in low for mark in _NOT_FOUND):
        raise ApplicationError(
            f"expected an image that exists: tag {ref.tag or DEFAULT_TAG} of "
            f"{ref.repository} is not in registry {ref.registry}",
            field=field,
            got=got,
        )
    if any(mark in low for mark in _DENIED):
        raise ApplicationError(
            f"registry {ref.registry} refused to show {ref.by_tag} to this portal",
            field=field,
            got=got,
        )
    raise ApplicationError(
        f"registry {ref.registry} could not be asked what {ref.by_tag} names "
        f"({words[0][-200:]}); try again later",
        field=field,
        got=got,
        status=503,
    )
