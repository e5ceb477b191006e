"""The portal's writes on capacity: lend nodes, drain or resume them (docs/capacity.md).

Nothing here calls a backend: the rows change, and a message asks a worker to carry the
change to the backends (the periodic passes would do it anyway).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from portal import audit, roles
from portal.errors import ApplicationError
from scheduling import outbox
from scheduling.decisions.humanize import format_duration
from scheduling.models import Node, NodeLease, Pool, Queue
from scheduling.selectors import site_view_invalidate
from scheduling.selectors.occupancy import running_on


def lease_open(
    *, user: User, pool: str, queue: str, count: int, duration_s: int, reason: str = ""
) -> NodeLease:
    """A platform admin lends `count` idle nodes of `pool` to `queue` for `duration_s`."""
    if not user.is_superuser:
        raise ApplicationError("only a platform admin lends nodes", status=403)
    the_pool = Pool.objects.filter(name=pool).first()
    if the_pool is None:
        raise ApplicationError("no such pool", field="pool", got=pool)
    the_queue = Queue.objects.select_related("pool").filter(name=queue).first()
    if the_queue is None:
        raise ApplicationError("no such queue", field="queue", got=queue)
    try:
        with transaction.atomic():
            lease = open_lease(
                pool=the_pool,
                queue=the_queue,
                count=count,
                duration_s=duration_s,
                by=user,
                reason=reason or f"lent by {user.get_username()}",
            )
            audit.record(
                audit.Action.LEASE_OPEN,
                actor=user,
                target=f"lease #{lease.pk}: {count} × {pool} → {queue}",
                queue=queue,
                detail={"nodes": [n.name for n in lease.nodes.all()], "until": str(lease.ends_at)},
            )
            return lease
    except LeaseError as exc:
        raise ApplicationError(str(exc), field=exc.field) from None


class LeaseError(ValueError):
    """Why a lease cannot open, and the field of the lend form it is about."""

    def __init__(self, message: str, field: str = "count") -> None:
        super().__init__(message)
        self.field = field


def open_lease(
    *,
    pool: Pool,
    queue: Queue,
    count: int,
    duration_s: int,
    now: datetime | None = None,
    by=None,
    schedule=None,
    reason: str = "",
) -> NodeLease:
    """Lend `count` idle nodes of `pool` to `queue` for `duration_s`; applied by the next pass."""
    now = now or timezone.now()
    longest = settings.SWITCHYARD_LEASE_MAX_HOURS * 3600
    if queue.pool_id == pool.pk:
        raise LeaseError("lend to a queue of another pool", field="queue")
    if queue.pool.backend != pool.backend:
        raise LeaseError(
            f"the nodes run on {pool.backend}, the queue on {queue.pool.backend}", field="queue"
        )
    if not 0 < duration_s <= longest:
        raise LeaseError(
            f"a lease lasts more than 0 s and at most {format_duration(longest)}", field="until"
        )
    busy = {a.node for o in running_on(pool=None) for a in o.allocations}
    lent = set(
        NodeLease.objects.filter(state=NodeLease.State.ACTIVE).values_list("nodes__name", flat=True)
    )
    # GPU nodes first: idle GPUs are what a lease is for (docs/capacity.md).
    idle = [
        n
        for n in Node.objects.filter(pool=pool, state=Node.State.UP).order_by("-gpus", "name")
        if n.name not in busy and n.name not in lent
    ]
    if count < 1 or len(idle) < count:
        raise LeaseError(f"pool {pool.name} has {len(idle)} idle node(s); {count} asked")
    with transaction.atomic():
        lease = NodeLease.objects.create(
            pool=pool,
            queue=queue,
            starts_at=now,
            ends_at=now + timedelta(seconds=duration_s),
            created_by=by,
            schedule=schedule,
            reason=reason,
        )
        lease.nodes.set(idle[:count])
    if queue.pool.warm_images:
        # The lease takes effect once the borrower's warm images are on its nodes, or when
        # the wait times out (docs/containers.md, "Pre-pulling").
        NodeLease.objects.filter(pk=lease.pk).update(prepull=NodeLease.Prepull.WAITING)
        lease.prepull = NodeLease.Prepull.WAITING
        transaction.on_commit(lambda: outbox.send(outbox.LEASE_PREPULL, (lease.pk,)))
    transaction.on_commit(lambda: outbox.send(outbox.CAPACITY, ()))
    return lease


def lease_end(*, user: User, lease_id: int) -> NodeLease:
    """A platform admin takes lent nodes back now: the next capacity pass (asked for at
    once) requeues the work still there and returns the nodes."""
    if not user.is_superuser:
        raise ApplicationError("only a platform admin ends a lease", status=403)
    lease = NodeLease.objects.filter(pk=lease_id).first()
    if lease is None:
        raise ApplicationError("no such lease", status=404)
    if lease.state != NodeLease.State.ACTIVE:
        raise ApplicationError(
            "the lease has already ended", field="state", got=lease.state, status=409
        )
    now = timezone.now()
    NodeLease.objects.filter(pk=lease.pk, ends_at__gt=now).update(
        ends_at=now, reason=f"{lease.reason}; ended early by {user.get_username()}".lstrip("; ")
    )
    lease.refresh_from_db()
    audit.record(
        audit.Action.LEASE_END, actor=user, target=f"lease #{lease.pk}", queue=lease.queue.name
    )
    outbox.send(outbox.CAPACITY, ())
    return lease


@transaction.atomic
def nodes_set_state(
    *, nodes: list[Node], state: str, reason: str, by: str, user: User | None = None
) -> int:
    """Drain, mark down or resume nodes; a worker tells their backends and, for a node
    marked down, fails and retries the work that ran there.

    With `user`, only what they may: a platform admin any node, a queue admin the nodes of
    their queues' pools (others are refused whole, before anything changes)."""
    if state not in Node.State.values:
        raise ApplicationError("must be up, drained or down", field="state", got=state)
    if user is not None:
        foreign = [n.name for n in nodes if not roles.administers_pool(user, n.pool_id)]
        if foreign:
            raise ApplicationError(
                "only a platform admin or an admin of a queue in its pool", status=404
            )
    changed = 0
    verb = {"up": audit.Action.NODE_RESUME, "drained": audit.Action.NODE_DRAIN}.get(
        state, audit.Action.NODE_DOWN
    )
    for node in nodes:
        health = {} if state == Node.State.UP else {"ok": False, "reason": f"{reason} ({by})"}
        done = (
            Node.objects.filter(pk=node.pk).exclude(state=state).update(state=state, health=health)
        )
        if done:
            audit.record(
                verb,
                actor=user if user is not None else audit.ACTOR_FROM_REQUEST,
                target=f"node {node.name}",
                detail={"reason": reason, "pool": node.pool.name},
            )
        changed += done
    ids = [n.pk for n in nodes]
    transaction.on_commit(lambda: outbox.send(outbox.NODES, (ids,)))
    transaction.on_commit(site_view_invalidate)
    return changed
