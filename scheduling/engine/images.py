"""Pre-pulling and the record of the nodes' image caches (docs/containers.md, "Pre-pulling").

Every `SWITCHYARD_PREPULL_MS` the pass asks each backend to pull its pools' warm images onto
their nodes (`Backend.prepull`; a backend that cannot does nothing) and records what each of
its caches holds (`Backend.image_caches`) in `NodeImageCache`, which the Capacity page and the
operator dashboard read: pages never call a backend.

A lease whose borrowing pool has warm images waits for them: it is opened `waiting`, a worker
asks the backend to pull them onto the lent nodes (`lease_prepull`), and the lease takes
effect (its nodes serve the borrower, the backend is told) once that returns, whatever it
says, or when `SWITCHYARD_LEASE_PREPULL_TIMEOUT_S` has passed since the lease opened: then it
starts anyway, with an alert saying which images were not there.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from scheduling import outbox
from scheduling.backends import BackendError
from scheduling.backends.base import ImageCacheView, Prepulled
from scheduling.decisions.warm import default_registry, warm_references
from scheduling.engine.registry import get_backend
from scheduling.models import Alert, Node, NodeImageCache, NodeLease, Pool
from scheduling.selectors import site_view_invalidate
from scheduling.services.alerts import raise_alert

log = logging.getLogger(__name__)
P = NodeLease.Prepull


def _registry() -> str:
    return default_registry(
        settings.SWITCHYARD_IMAGE_REGISTRY, settings.SWITCHYARD_IMAGE_REGISTRIES
    )


def _note(results: dict[str, Prepulled]) -> str:
    return "\n".join(f"{ref}: {r.note}" for ref, r in results.items())


# -- the periodic pass ------------------------------------------------------------------------


def prepull_pass() -> dict[str, int]:
    """Each pool's warm images onto its nodes; then every backend's caches recorded."""
    pulled = failed = 0
    by_alias: dict[str, list[Pool]] = {}
    for pool in Pool.objects.order_by("name"):
        by_alias.setdefault(pool.backend, []).append(pool)
    for alias, pools in by_alias.items():
        try:
            backend = get_backend(alias)
        except Exception:  # noqa: BLE001 - a pool naming a backend not configured here
            log.warning("pre-pull: backend %s of pools %s not usable", alias, pools, exc_info=True)
            continue
        if backend.prepulls:
            for pool in pools:
                images = warm_references([pool.warm_images], default_registry=_registry())
                nodes = list(Node.objects.filter(pool=pool).values_list("name", flat=True))
                if not images or not nodes:
                    continue
                try:
                    results = backend.prepull(
                        images, nodes=nodes, timeout_s=settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S
                    )
                except BackendError as exc:
                    log.warning("pre-pull of pool %s failed: %s", pool.name, exc)
                    continue
                for ref, result in results.items():
                    pulled += result.ok
                    failed += not result.ok
                    if not result.ok:
                        log.warning("pre-pull of %s onto pool %s: %s", ref, pool.name, result.note)
        record_caches(alias, backend)
    return {"images_ready": pulled, "images_failed": failed}


def record_caches(alias: str, backend) -> int:
    """What the backend's image caches hold now, stored for the pages (the rows of caches it
    no longer lists go)."""
    try:
        caches: list[ImageCacheView] = backend.image_caches()
    except BackendError as exc:
        log.warning("could not list the image caches of %s: %s", alias, exc)
        return 0
    now = timezone.now()
    with transaction.atomic():
        NodeImageCache.objects.filter(backend=alias).delete()
        NodeImageCache.objects.bulk_create(
            NodeImageCache(
                backend=alias,
                nodes=list(cache.nodes),
                images=[
                    {
                        "reference": i.reference,
                        "digest": i.digest,
                        "bytes": i.bytes,
                        "pull_bytes": i.pull_bytes,
                        "last_used": i.last_used,
                    }
                    for i in cache.images
                ],
                cache_bytes=cache.cache_bytes,
                pulled_bytes=cache.pulled_bytes,
                pulls=cache.pulls,
                at=now,
            )
            for cache in caches
        )
    return len(caches)


# -- leases -----------------------------------------------------------------------------------


def lease_prepull(lease_id: int) -> str:
    """The borrowing pool's warm images onto the lease's nodes, then the lease takes effect
    (unless the capacity pass has already started it at its timeout)."""
    lease = (
        NodeLease.objects.select_related("pool", "queue__pool")
        .prefetch_related("nodes")
        .filter(pk=lease_id)
        .first()
    )
    if lease is None or lease.prepull != P.WAITING or lease.state != NodeLease.State.ACTIVE:
        return "not waiting"
    backend = get_backend(lease.pool.backend)
    images = warm_references([lease.queue.pool.warm_images], default_registry=_registry())
    deadline = lease.starts_at + timedelta(seconds=settings.SWITCHYARD_LEASE_PREPULL_TIMEOUT_S)
    left = (deadline - timezone.now()).total_seconds()
    if not backend.prepulls:
        outcome, note = P.NOT_SUPPORTED, f"backend {lease.pool.backend} does not pre-pull"
    elif not images:
        outcome, note = P.DONE, "no warm images"
    else:
        try:
            results = backend.prepull(
                images, nodes=sorted(n.name for n in lease.nodes.all()), timeout_s=max(1.0, left)
            )
        except BackendError as exc:
            results = {ref: Prepulled(False, f"the backend failed: {exc}") for ref in images}
        outcome = P.DONE if all(r.ok for r in results.values()) else P.FAILED
        note = _note(results)
    if not NodeLease.objects.filter(pk=lease.pk, prepull=P.WAITING).update(
        prepull=outcome, prepull_note=note
    ):
        return "timed out meanwhile"
    if outcome == P.FAILED:
        raise_alert(
            Alert.Kind.LEASE,
            f"lease #{lease.pk}: not every warm image was pulled",
            f"{lease}: the lease starts without them:\n{note}",
        )
    record_caches(lease.pool.backend, backend)
    _take_effect()
    return outcome


def prepull_timeouts(now: datetime) -> int:
    """Leases still waiting for their pre-pull past the timeout start anyway, with an alert."""
    cutoff = now - timedelta(seconds=settings.SWITCHYARD_LEASE_PREPULL_TIMEOUT_S)
    late = list(
        NodeLease.objects.filter(
            state=NodeLease.State.ACTIVE, prepull=P.WAITING, starts_at__lte=cutoff
        ).select_related("pool", "queue")
    )
    started = 0
    for lease in late:
        limit = settings.SWITCHYARD_LEASE_PREPULL_TIMEOUT_S
        note = f"the pre-pull did not finish within {limit}s; the lease started without waiting"
        if NodeLease.objects.filter(pk=lease.pk, prepull=P.WAITING).update(
            prepull=P.TIMED_OUT, prepull_note=note
        ):
            raise_alert(
                Alert.Kind.LEASE,
                f"lease #{lease.pk} started before its images were pulled",
                f"{lease}: {note}",
            )
            started += 1
    if started:
        site_view_invalidate()
    return started


def _take_effect() -> None:
    """The lease's nodes serve the borrower now: the site view is read again and the
    capacity pass tells the backend."""
    site_view_invalidate()
    outbox.send(outbox.CAPACITY, ())
