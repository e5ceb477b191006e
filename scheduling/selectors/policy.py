"""The policy's decisions applied to the portal's tasks: levels, weights, shares, the order.

Glue between the site's policy (`selectors.site_view()`) and the pure functions in
`scheduling/decisions/` (levels, order, quota): services use it when they store a task, the
engine when it re-levels, admits and orders. docs/policy.md describes the rules.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterable, Mapping
from datetime import datetime

from django.conf import settings

from scheduling.decisions import levels as L
from scheduling.decisions import lifecycle
from scheduling.decisions.order import OVERDUE, order_key, overdue, priority_value, weight_at
from scheduling.selectors.site import SiteView


def site_minute(now: datetime) -> int:
    """Minutes after midnight in the site's time zone (weight windows are in site time)."""
    local = now.astimezone(zoneinfo.ZoneInfo(settings.SWITCHYARD_SITE_TIMEZONE))
    return local.hour * 60 + local.minute


def task_level(
    site: SiteView,
    *,
    task_type: str,
    queue: str,
    ready_at: datetime,
    priority: str,
    now: datetime,
    floor: tuple[int, datetime | None, str] | None = None,
) -> L.Level:
    rule = L.rule_for(site.level_rules, task_type, queue)
    waiting = L.Waiting(
        task_type=task_type,
        queue=queue,
        ready_at=ready_at,
        cap=L.cap_of(priority),
        floor=floor[0] if floor else None,
        floor_until=floor[1] if floor else None,
        floor_reason=floor[2] if floor else "",
    )
    return L.level(waiting, rule, now)


# The states in which a task's wait counts against its queue's bound: not while held (for a
# dependency, a trigger or its quota), whatever its clock says.
READY = (lifecycle.PENDING, lifecycle.QUEUED)


def past_bound(site: SiteView, *, queue: str, ready_at: datetime, now: datetime) -> int | None:
    """The bound of `queue` where a task ready since `ready_at` has waited past it (it then
    stands at `order.OVERDUE` in the start order), else None."""
    policy = site.queues.get(queue)
    bound = policy.wait_bound_s if policy is not None else None
    return bound if overdue((now - ready_at).total_seconds(), bound) else None


def task_value(
    site: SiteView,
    *,
    level: int,
    task_type: str,
    queue: str,
    share: float,
    minute: int,
    borrowed: bool = False,
) -> int:
    """The backend's priority number for a task of this level, type and project share, on
    its own quota or on borrowed room."""
    weight = weight_at(site.weights.get(queue, ()), task_type, minute)
    return priority_value(level=level, weight=weight, share=share, borrowed=borrowed)


def ordered(
    site: SiteView,
    tasks: Iterable,
    *,
    queue: str,
    shares: Mapping[str, float],
    minute: int,
    now: datetime | None = None,
) -> list:
    """Tasks (with .level, .type, .project.slug or .project_slug, .ready_at, .pk) in the order
    they should start: level, the time of day's weight, fair share, then first come; with
    `now`, those ready past their queue's bound first (`order.OVERDUE`): `queue`'s, or for a
    task loaded with its `queue_id`, its own queue's (a pool's tasks of several queues)."""
    names = {number: name for name, number in site.queue_ids.items()}

    def late(task) -> bool:
        loaded = getattr(task, "__dict__", {})  # fields not loaded are not read (a query each)
        if (
            now is None
            or task.ready_at is None
            or loaded.get("state", lifecycle.QUEUED) not in READY
        ):
            return False
        policy = site.queues.get(names.get(loaded.get("queue_id", -1), queue))
        bound = policy.wait_bound_s if policy is not None else None
        return overdue((now - task.ready_at).total_seconds(), bound)

    def key(task) -> tuple:
        slug = getattr(task, "project_slug", None) or task.project.slug
        ready = task.ready_at or task.submitted_at
        return order_key(
            level=OVERDUE if late(task) else task.level,
            weight=weight_at(site.weights.get(queue, ()), task.type, minute),
            share=shares.get(slug, 1.0),
            ready_at=ready.timestamp(),
            task_id=task.pk,
            borrowed=bool(getattr(task, "borrowed", "")),
        )

    return sorted(tasks, key=key)


def policy_fields(site: SiteView, decided, *, now: datetime, ready: bool) -> dict:
    """A new task's quota amounts, level clock, entry level and backend number, by the rules
    that routed it (a canary's, or the current ones). `decided`: the submission's decision
    (its spec, type, queue and canary; scheduling/services/tasks.py)."""
    spec = decided.spec
    site = site.arm(decided.canary)
    level = task_level(
        site,
        task_type=decided.type,
        queue=decided.queue,
        ready_at=now,
        priority=spec.priority,
        now=now,
    )
    return {
        "gpus": spec.resources.gpus,
        "cpus": spec.resources.cpus,
        "ready_at": now if ready else None,
        "canary_id": decided.canary,
        "level": level.level,
        "level_reason": level.reason,
        "priority_value": task_value(
            site,
            level=level.level,
            task_type=decided.type,
            queue=decided.queue,
            share=1.0,
            minute=site_minute(now),
        ),
    }
