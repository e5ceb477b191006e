"""What a task not yet submitted would meet in its queue: the quotas it counts against with
their room now, whether admission would let it in or hold it, its place among the queue's
waiting tasks and when it could start (the submit page's preview, docs/policy.md).

Reads only, through the same decisions the engine uses: `admit` for the quotas, `ordered`
for the queue's order, `estimate_start` for the pool replay (as a waiting task's page does).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime

from portal.models import Project
from scheduling.decisions.estimate import Ahead, estimate_start
from scheduling.decisions.quota import (
    BUDGETS,
    Ask,
    Hold,
    QuotaRule,
    Reject,
    Usage,
    admit,
    applicable,
    quota_text,
)
from scheduling.models import Task, TaskState
from scheduling.selectors.fairshare import share_factors_for
from scheduling.selectors.policy import ordered, site_minute, task_level
from scheduling.selectors.quota import queue_usage, with_budgets
from scheduling.selectors.site import SiteView
from scheduling.selectors.waiting import pool_busy
from scheduling.spec import TaskSpec

_UNITS = {"gpus": "GPUs", "cpus": "CPUs", "tasks": "running tasks"}
_BUDGET_UNITS = {"gpu_hours": "GPU-hours", "core_hours": "core-hours"}


@dataclass(frozen=True, slots=True)
class Room:
    """One quota the task counts against and its room now; shown as `text`."""

    text: str  # `project materials uses 8/32 GPUs in queue training: room for 24 more GPUs`
    project: str
    user: str | None  # None: the whole project's quota
    queue: str
    resource: str  # gpus | cpus | tasks | gpu_hours | core_hours
    limit: int
    used: float
    left: float
    period: str | None = None  # a budget's: month, quarter, …

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Outlook:
    quotas: tuple[Room, ...]  # each quota it counts against, with its room now
    admission: str  # what admission would say now
    held: bool  # admission would hold it for its quota
    position: int | None = None  # 1 = next to start among the queue's waiting tasks
    waiting: int = 0  # the queue's tasks waiting to start, this one not counted
    start: datetime | None = None  # could start by then at the latest (None: unknown)
    at_once: bool = False  # the pool has room for it now


@dataclass(frozen=True, slots=True)
class _New:
    """The task as `ordered` sees it: the last to arrive at its level."""

    level: int
    type: str
    project_slug: str
    ready_at: datetime
    submitted_at: datetime
    pk: int = sys.maxsize


def outlook(
    site: SiteView, spec: TaskSpec, *, task_type: str, queue: str, user: str, now: datetime
) -> Outlook:
    """What `spec`, decided as `task_type` in `queue` and submitted by `user` now, meets."""
    rules = site.quota_rules(spec.project, queue)
    ask = Ask(spec.project, queue, user, spec.resources.gpus, spec.resources.cpus)
    mine = applicable(rules, ask)
    usage = with_budgets(queue_usage(site.queue_ids[queue]), mine, now) if mine else {}
    decision = admit(ask, rules, usage, cohort=site.quota_cohort(spec.project, queue))
    lines = tuple(_room(rule, usage.get(rule.scope, Usage())) for rule in mine)
    if isinstance(decision, Hold | Reject):
        return Outlook(lines, decision.reason, held=True)
    if not mine:
        admission = f"no quota limits project {spec.project} in queue {queue}"
    else:
        admission = "its quota has room now" + (f": it {decision.text}" if decision.text else "")
    position, waiting, start = _start(site, spec, task_type=task_type, queue=queue, now=now)
    at_once = start is not None and (start - now).total_seconds() < 60
    return Outlook(lines, admission, False, position, waiting, start, at_once)


def _room(rule: QuotaRule, usage: Usage) -> Room:
    """`project materials uses 8/32 GPUs in queue training: room for 24 more`."""
    used = usage.amount(rule.resource)
    left = max(0.0, rule.limit - used)
    budget = rule.resource in BUDGETS
    if budget:
        text = f"{quota_text(rule, used)}: {left:g} {_BUDGET_UNITS[rule.resource]} left"
    else:
        text = f"{quota_text(rule, used)}: room for {left:g} more {_UNITS[rule.resource]}"
    return Room(
        text,
        rule.project,
        rule.user,
        rule.queue,
        rule.resource,
        rule.limit,
        used,
        left,
        rule.period if budget else None,
    )


def _start(
    site: SiteView, spec: TaskSpec, *, task_type: str, queue: str, now: datetime
) -> tuple[int, int, datetime | None]:
    """Its place among the queue's tasks waiting to start, and when the pool replay lets it
    start. Tasks its quota holds take no room: when they are let in is not known here."""
    policy = site.queues[queue]
    peers = list(
        Task.objects.filter(
            queue_id=site.queue_ids[queue], state__in=(TaskState.PENDING, TaskState.QUEUED)
        ).only("id", "type", "level", "ready_at", "submitted_at", "project_id", "spec", "borrowed")
    )
    slugs = dict(
        Project.objects.filter(pk__in={t.project_id for t in peers}).values_list("pk", "slug")
    )
    for peer in peers:
        peer.project_slug = slugs.get(peer.project_id, "")  # type: ignore[attr-defined]  # read by ordered()
    level = task_level(
        site, task_type=task_type, queue=queue, ready_at=now, priority=spec.priority, now=now
    )
    me = _New(level.level, task_type, spec.project, now, now)
    shares = share_factors_for(site, queue, now)
    order = ordered(
        site, [*peers, me], queue=queue, shares=shares, minute=site_minute(now), now=now
    )
    place = order.index(me)
    ahead = [Ahead(TaskSpec.from_dict(peer.spec), policy) for peer in order[:place]]
    nodes = site.pool_nodes.get(policy.pool, ())
    start = estimate_start(spec, policy, nodes, pool_busy(nodes), ahead, now.timestamp())
    when = datetime.fromtimestamp(start, tz=UTC) if start is not None else None
    return place + 1, len(peers), when
