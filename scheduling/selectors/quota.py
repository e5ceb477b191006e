"""What quotas hold now: the admitted tasks that have not ended, summed per scope.

A scope is (project, queue) or (project, queue, user). One grouped query per queue gives
every scope's use at once, for admission (under the quota rows' lock) and for the pages.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db.models import Count, Sum
from django.utils import timezone

from portal.models import Project
from scheduling import hooks
from scheduling.decisions.quota import (
    BUDGETS,
    QuotaRule,
    Usage,
    borrowing,
    lending_text,
    quota_text,
)
from scheduling.models import TERMINAL_STATES, Quota, Task, TaskState
from scheduling.selectors.site import quota_rule

Scope = tuple[str, str, str | None]


def queue_usage(queue_id: int, *, project_id: int | None = None) -> dict[Scope, Usage]:
    """Each scope's use in one queue (optionally only one project's scopes)."""
    held = Task.objects.filter(queue_id=queue_id, admitted=True).exclude(state__in=TERMINAL_STATES)
    if project_id is not None:
        held = held.filter(project_id=project_id)
    rows = (
        held.order_by()
        .values("project__slug", "queue__name", "owner__username")
        .annotate(gpus=Sum("gpus"), cpus=Sum("cpus"), tasks=Count("id"))
    )
    totals: dict[Scope, list[int]] = defaultdict(lambda: [0, 0, 0])
    for row in rows:
        amounts = (row["gpus"] or 0, row["cpus"] or 0, row["tasks"])
        for scope in (
            (row["project__slug"], row["queue__name"], None),
            (row["project__slug"], row["queue__name"], row["owner__username"]),
        ):
            total = totals[scope]
            for i, amount in enumerate(amounts):
                total[i] += amount
    return {scope: Usage(*values) for scope, values in totals.items()}


def with_budgets(
    usage: dict[Scope, Usage], rules: Iterable[QuotaRule], now: datetime | None = None
) -> dict[Scope, Usage]:
    """`usage` with the hours each budget rule's scope used in its period filled in."""
    now = now or timezone.now()
    for rule in rules:
        if rule.resource in BUDGETS:
            hours = round(hooks.budget_used(rule, now), 3)
            current = usage.get(rule.scope, Usage())
            if rule.resource == "gpu_hours":
                usage[rule.scope] = dataclasses.replace(current, gpu_hours=hours)
            else:
                usage[rule.scope] = dataclasses.replace(current, core_hours=hours)
    return usage


def project_quotas(project: Project) -> list[dict[str, Any]]:
    """The project's quotas with their limits and what they hold now (for the API and pages)."""
    quotas = list(Quota.objects.filter(project=project).select_related("project", "queue", "user"))
    usage: dict[Scope, Usage] = {}
    for queue_id in {q.queue_id for q in quotas}:
        usage.update(queue_usage(queue_id, project_id=project.pk))
    usage = with_budgets(usage, [quota_rule(q) for q in quotas])
    on_loan = _on_borrowed_room(project)
    report = []
    for quota in quotas:
        rule = quota_rule(quota)
        used = usage.get(rule.scope, Usage()).amount(rule.resource)
        lending = lending_text(rule, used)
        running, waiting = on_loan.get(rule.queue, (0, 0)) if rule.borrowing_limit else (0, 0)
        report.append(
            {
                "queue": rule.queue,
                "user": rule.user,
                "resource": rule.resource,
                "limit": rule.limit,
                "used": used,
                "over_quota": rule.over_quota,
                "period": rule.period if rule.resource in BUDGETS else None,
                "borrowing_limit": rule.borrowing_limit,
                "lending_limit": rule.lending_limit,
                "borrowed": borrowing(rule, used),
                "on_borrowed_room": {"running": running, "waiting": waiting},
                "text": quota_text(rule, used) + (f"; {lending}" if lending else ""),
            }
        )
    return report


def _on_borrowed_room(project: Project) -> dict[str, tuple[int, int]]:
    """Per queue: how many of the project's tasks admitted on borrowed room run, and how
    many wait to start."""
    rows = (
        Task.objects.filter(project=project, admitted=True)
        .exclude(borrowed="")
        .exclude(state__in=TERMINAL_STATES)
        .order_by()
        .values("queue__name", "state")
        .annotate(n=Count("id"))
    )
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        found[row["queue__name"]][0 if row["state"] == TaskState.RUNNING else 1] += row["n"]
    return {queue: (r, w) for queue, (r, w) in found.items()}
