"""Reads: permission-checked fetches of tasks, and the site's policy as plain decision values."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from portal.errors import ApplicationError
from scheduling.decisions import PoolCapacity, pool_capacity
from scheduling.decisions.types import NodeView, QueuePolicy, RoutingRuleView
from scheduling.models import Node, Queue, RoutingRule, Task, Workflow


def task_list_for_user(user: AbstractBaseUser) -> QuerySet[Task]:
    """Every task in the user's projects: the only way views reach tasks."""
    return Task.objects.filter(project__memberships__user=user).select_related(
        "project", "queue", "owner"
    )


def task_get_for_user(user: AbstractBaseUser, pk: int | str) -> Task:
    """One task of the user's projects, or a 404 (never a 403: others' tasks do not exist)."""
    try:
        return task_list_for_user(user).get(pk=_id(pk))
    except (Task.DoesNotExist, ValueError, TypeError):
        raise Http404("no such task") from None


# Ids the database can hold (a bigint): a larger number in a URL is a 404, not a 500.
_MAX_ID = 2**63 - 1


def _id(pk: int | str) -> int:
    value = int(pk)
    if not 0 < value <= _MAX_ID:
        raise ValueError(pk)
    return value


def tasks_visible_by_ids(user: AbstractBaseUser, ids: Iterable[int], *, field: str) -> list[Task]:
    """The tasks with these ids, all of which the user must be able to see.

    An id the user cannot see is refused like one that does not exist (400 naming the field).
    """
    ids = list(ids)
    if not ids:
        return []
    found = {t.pk: t for t in task_list_for_user(user).filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ApplicationError(
            f"no task #{missing[0]} among your projects' tasks", field=field, got=missing[0]
        )
    return [found[i] for i in ids]


def workflow_list_for_user(user: AbstractBaseUser) -> QuerySet[Workflow]:
    return Workflow.objects.filter(project__memberships__user=user).select_related(
        "project", "owner"
    )


def workflow_get_for_user(user: AbstractBaseUser, pk: int | str) -> Workflow:
    try:
        return workflow_list_for_user(user).get(pk=_id(pk))
    except (Workflow.DoesNotExist, ValueError, TypeError):
        raise Http404("no such workflow") from None


def queue_policy(queue: Queue) -> QueuePolicy:
    return QueuePolicy(
        name=queue.name,
        pool=queue.pool.name,
        task_types=tuple(queue.task_types or ()),
        max_walltime_s=queue.max_walltime_s,
        default_walltime_s=queue.default_walltime_s,
        requires_estimate=queue.requires_estimate,
        preemptible=queue.preemptible,
        allocation=queue.allocation,
        cpu_oversubscription=queue.cpu_oversubscription,
        max_concurrency=queue.max_concurrency,
        policy=queue.policy,
    )


def node_view(node: Node) -> NodeView:
    return NodeView(
        name=node.name,
        cpus=node.cpus,
        memory_mib=node.memory_mib,
        gpus=node.gpus,
        gpu_model=node.gpu_model or None,
        switch=node.switch or None,
        available=node.state == Node.State.UP,
    )


def node_views_for_backend(alias: str) -> dict[str, list[NodeView]]:
    """The inventory a backend runs on, by pool: a queue's jobs go only to its pool's nodes."""
    pools: dict[str, list[NodeView]] = {}
    for node in Node.objects.filter(pool__backend=alias).select_related("pool").order_by("name"):
        pools.setdefault(node.pool.name, []).append(node_view(node))
    return pools


@dataclass(frozen=True, slots=True)
class SiteView:
    """The routing policy of the whole site, as the pure decision functions take it."""

    queues: dict[str, QueuePolicy]
    queue_ids: dict[str, int]
    queue_backends: dict[str, str]
    rules: tuple[RoutingRuleView, ...]
    pool_nodes: dict[str, tuple[NodeView, ...]]
    pool_capacity: dict[str, PoolCapacity]

    def capacity(self, pool: str) -> PoolCapacity:
        return self.pool_capacity.get(pool) or pool_capacity(())


_site_cache: dict[str, tuple[float, SiteView]] = {}
_site_lock = threading.Lock()
# Submissions read the site policy on every request; a short cache keeps that off the hot
# path. Admin edits are seen by every process within this many seconds.
SITE_CACHE_SECONDS = 2.0


def site_view(*, fresh: bool = False) -> SiteView:
    now = time.monotonic()
    with _site_lock:
        cached = _site_cache.get("site")
        if cached and not fresh and now - cached[0] < SITE_CACHE_SECONDS:
            return cached[1]
    view = _load_site_view()
    with _site_lock:
        _site_cache["site"] = (now, view)
    return view


def site_view_invalidate() -> None:
    with _site_lock:
        _site_cache.clear()


def _load_site_view() -> SiteView:
    queues = list(Queue.objects.select_related("pool"))
    pool_nodes: dict[str, list[NodeView]] = {}
    for node in Node.objects.select_related("pool").order_by("name"):
        pool_nodes.setdefault(node.pool.name, []).append(node_view(node))
    rules = tuple(
        RoutingRuleView(
            order=r.order,
            queue=r.queue.name,
            match_type=r.match_type or None,
            min_gpus=r.min_gpus,
            min_cpus=r.min_cpus,
        )
        for r in RoutingRule.objects.filter(enabled=True).select_related("queue")
    )
    return SiteView(
        queues={q.name: queue_policy(q) for q in queues},
        queue_ids={q.name: q.pk for q in queues},
        queue_backends={q.name: q.pool.backend for q in queues},
        rules=rules,
        pool_nodes={pool: tuple(nodes) for pool, nodes in pool_nodes.items()},
        pool_capacity={pool: pool_capacity(nodes) for pool, nodes in pool_nodes.items()},
    )
