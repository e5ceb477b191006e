"""Reads of the image catalogue: as the decision value submissions check against, and as a
researcher's list of what they may run (docs/containers.md, "Catalogue")."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date
from typing import Any

from django.contrib.auth.models import User

from scheduling.decisions.catalogue import Catalogue
from scheduling.decisions.types import QueuePolicy
from scheduling.models import CatalogueImage, ImageRegistry, Pool


def image_catalogue() -> Catalogue:
    """The whole catalogue, with each pool's image size limit."""
    images = CatalogueImage.objects.select_related("registry").prefetch_related("pools")
    return Catalogue(
        registries=tuple(r.as_entry() for r in ImageRegistry.objects.all()),
        images=tuple(i.as_entry(tuple(sorted(p.name for p in i.pools.all()))) for i in images),
        size_limits={
            name: limit
            for name, limit in Pool.objects.values_list("name", "max_image_bytes")
            if limit is not None
        },
    )


def pools_by_type(
    queues: Iterable[QueuePolicy],
    backends: dict[str, str],
    task_types: Iterable[str],
    runs_images: Callable[[str], bool],
) -> dict[str, set[str]]:
    """Each task type's pools that run images: those of the queues that take it."""
    found: dict[str, set[str]] = {kind: set() for kind in task_types}
    for queue in queues:
        if not runs_images(backends.get(queue.name, "")):
            continue
        for kind in found:
            if not queue.task_types or kind in queue.task_types:
                found[kind].add(queue.pool)
    return found


def images_for_user(
    user: User,
    *,
    catalogue: Catalogue,
    pools_by_type: dict[str, set[str]],
    today: date,
    task_type: str | None = None,
    pool: str | None = None,
) -> dict[str, Any]:
    """What `user` may name in `image`: the catalogue's images not retired, each with the task
    types and pools that may run it (those a task of the type can be routed to), and the
    registries that allow any image. Every signed-in user submits through the same routing,
    so the list is the site's; `task_type` and `pool` narrow it."""
    del user  # every member sees the same catalogue; kept so the API reads as the others do
    every_pool = sorted({p for pools in pools_by_type.values() for p in pools})
    images = []
    for entry in catalogue.images:
        if entry.retired(today):
            continue
        uses = {
            kind: sorted(p for p in pools if entry.for_pool(p))
            for kind, pools in sorted(pools_by_type.items())
            if entry.for_type(kind)
        }
        uses = {kind: pools for kind, pools in uses.items() if pools}
        if task_type is not None:
            uses = {k: v for k, v in uses.items() if k == task_type}
        if pool is not None:
            uses = {k: [p for p in v if p == pool] for k, v in uses.items()}
            uses = {k: v for k, v in uses.items() if v}
        if not uses:
            continue
        images.append(
            {
                "name": entry.name,
                "registry": entry.registry,
                "repository": entry.repository,
                "tags": list(entry.tags),
                "any_tag": not entry.tags,
                "family": entry.family,
                "task_types": list(uses),
                "pools": sorted({p for v in uses.values() for p in v}),
                "uses": [{"type": k, "pools": v} for k, v in uses.items()],
                "default_for": [t for t in entry.default_for if t in uses],
                "state": entry.state,
                "deprecated": entry.deprecated(today),
                "retire_on": entry.retire_on.isoformat() if entry.retire_on else None,
                "note": entry.note,
            }
        )
    shown_pools = [p for p in every_pool if pool is None or p == pool]
    return {
        "registries": [{"host": r.host, "any_image": r.any_image} for r in catalogue.registries],
        "images": images,
        "size_limits": {p: catalogue.size_limits.get(p) for p in shown_pools},
    }
