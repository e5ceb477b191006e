"""Who sees the capacity the site moves around: the Capacity page's pools, their leases and
alerts. Platform admins see all of it; a queue admin sees what touches the pools of their
queues (leases out of them or into one of their queues' pools); for anyone else it does not
exist: a lease they cannot see is a 404, a list of leases is empty (docs/security.md).

A researcher's own share of a lease is on their tasks: a task requeued when a lease ended says
so on its timeline, with the lease's number.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet

from portal import roles
from scheduling.models import (
    Alert,
    LeaseSchedule,
    Node,
    NodeImageCache,
    NodeLease,
    Pool,
    PoolBorrowing,
)
from scheduling.selectors.access import task_list_for_user
from scheduling.selectors.occupancy import running_on

# The states a node and a lease can be in, for the pages and the API to check and filter by.
NodeStates = Node.State
LeaseStates = NodeLease.State


def capacity_pools_for_user(user: User) -> QuerySet[Pool]:
    """A platform admin's pools are all of them; a queue admin's, those of their queues; no
    one else's."""
    pools = Pool.objects.order_by("name")
    if roles.is_platform_admin(user):
        return pools
    return pools.filter(pk__in=roles.administered_pool_ids(user))


def borrowing_for_pools(pools: QuerySet[Pool]) -> QuerySet[PoolBorrowing]:
    """The backfill-across-pools pairs (on or off) where one of `pools` borrows or lends."""
    return (
        PoolBorrowing.objects.filter(Q(borrower__in=pools) | Q(lender__in=pools))
        .select_related("borrower", "lender")
        .order_by("borrower__name", "lender__name")
    )


def lenders_by_pool() -> dict[str, list[str]]:
    """Per pool, the pools whose idle cores its CPU jobs may use (the pairs switched on)."""
    lenders: dict[str, list[str]] = {}
    for b in borrowing_for_pools(Pool.objects.all()).filter(enabled=True):
        lenders.setdefault(b.borrower.name, []).append(b.lender.name)
    return lenders


def node_by_name(name: str) -> Node | None:
    return Node.objects.select_related("pool").filter(name=name).first()


def node_in_pools(pk: int, pools: QuerySet[Pool]) -> Node | None:
    return Node.objects.filter(pk=pk, pool__in=pools).select_related("pool").first()


def lease_list_for_user(user: User) -> QuerySet[NodeLease]:
    """The leases the Capacity page shows this user, newest first."""
    leases = NodeLease.objects.select_related("pool", "queue", "created_by").prefetch_related(
        "nodes"
    )
    if roles.is_platform_admin(user):
        return leases.order_by("-id")
    pools = roles.administered_pool_ids(user)
    if not pools:
        return leases.none()
    return leases.filter(Q(pool_id__in=pools) | Q(queue__pool_id__in=pools)).order_by("-id")


def alert_list_for_user(user: User, pools: QuerySet[Pool]) -> QuerySet[Alert]:
    alerts = Alert.objects.select_related("node", "task")
    if roles.is_platform_admin(user):
        return alerts
    return alerts.filter(Q(node__pool__in=pools) | Q(task__queue__pool__in=pools))


def image_caches_for_pools(pools: Iterable[Any]) -> list[dict[str, Any]]:
    """The image caches of these pools' nodes, as the engine last recorded them (pages never
    ask a backend): each with the nodes it serves among these, its images (reference, short
    digest, size, last use, newest first), its size and what every pull into it moved."""
    names = set(Node.objects.filter(pool__in=pools).values_list("name", flat=True))
    rows = []
    for cache in NodeImageCache.objects.all():
        nodes = [n for n in cache.nodes if n in names]
        if not nodes:
            continue
        images = [
            {
                "reference": i.get("reference", ""),
                "digest": i.get("digest", ""),
                "digest_short": str(i.get("digest", "")).removeprefix("sha256:")[:12],
                "bytes": i.get("bytes", 0),
                "pull_bytes": i.get("pull_bytes", 0),
                "last_used": datetime.fromtimestamp(float(i.get("last_used", 0)), tz=UTC),
            }
            for i in cache.images
        ]
        rows.append(
            {
                "backend": cache.backend,
                "nodes": nodes,
                "images": images,
                "cache_bytes": cache.cache_bytes,
                "pulled_bytes": cache.pulled_bytes,
                "pulls": cache.pulls,
                "at": cache.at,
            }
        )
    return rows


def node_rows(pools: Iterable[Pool], user: User) -> list[dict[str, Any]]:
    """Every node of `pools` with the cores and GPUs its running tasks hold, and those of the
    tasks `user` may see (`others`: how many more run there), for the Capacity page's table
    (what the portal knows: selectors/occupancy.py). A queue admin's pool may run another
    queue's work (borrowed cores, a lease): its room counts, its name and owner stay hidden
    as its own page is."""
    nodes = [n for p in pools for n in p.nodes.all()]
    held: dict[str, dict[str, Any]] = {
        n.name: {"cpus": 0, "gpus": 0, "tasks": [], "others": 0} for n in nodes
    }
    occupants = running_on({n.name for n in nodes})
    seen = _visible(user, [o.task for o in occupants])
    for occupant in occupants:
        for allocation in occupant.allocations:
            use = held.get(allocation.node)
            if use is None:
                continue  # the task's other nodes are in pools this user does not see
            use["cpus"] += allocation.cpus
            use["gpus"] += len(allocation.gpu_indices)
            if occupant.task.pk in seen:
                use["tasks"].append(occupant.task)
            else:
                use["others"] += 1
    return [{"node": n, "pool": n.pool, **held[n.name]} for n in nodes]


def tasks_on_node(node: Node, user: User) -> tuple[list[Any], int]:
    """The tasks running on `node` now that `user` may see, oldest first (what a drain lets
    finish), and how many others run there."""
    found = [o.task for o in sorted(running_on({node.name}), key=lambda o: o.started_at)]
    seen = _visible(user, found)
    return [t for t in found if t.pk in seen], sum(t.pk not in seen for t in found)


def _visible(user: User, tasks: list[Any]) -> set[int]:
    """Which of `tasks` `user` may see (the task list's own rule)."""
    if not tasks:
        return set()
    pks = [t.pk for t in tasks]
    return set(task_list_for_user(user).filter(pk__in=pks).values_list("pk", flat=True))


def lease_schedule_list() -> QuerySet[LeaseSchedule]:
    return LeaseSchedule.objects.select_related("pool", "queue").order_by("start", "id")


def lease_schedule_get(pk: int) -> LeaseSchedule | None:
    return lease_schedule_list().filter(pk=pk).first()
