"""What a budget quota counts: the GPU-hours or core-hours its scope used in the current
period — the usage records (daily roll-up) of the period, plus what its running tasks have
used so far (docs/accounting.md). Registered as the scheduling app's budget reader."""

from __future__ import annotations

import zoneinfo
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db.models import Sum

from accounting.metrics import METRICS
from accounting.models import UsageDaily
from scheduling.models import Attempt, AttemptState

_METRIC = {"gpu_hours": "gpu", "core_hours": "cpu"}


def period_start(period: str, now: datetime) -> datetime:
    """The start of the current day, week (Monday) or month, in the site's time zone."""
    local = now.astimezone(zoneinfo.ZoneInfo(settings.SWITCHYARD_SITE_TIMEZONE))
    day: date = local.date()
    if period == "week":
        day -= timedelta(days=day.weekday())
    elif period == "month":
        day = day.replace(day=1)
    return datetime.combine(day, datetime.min.time(), tzinfo=local.tzinfo)


def day_start(day: date) -> datetime:
    """The first instant of `day` in the site's time zone."""
    zone = zoneinfo.ZoneInfo(settings.SWITCHYARD_SITE_TIMEZONE)
    return datetime.combine(day, datetime.min.time(), tzinfo=zone)


def used_hours(rule, now: datetime) -> float:
    """Hours `rule`'s scope (project, queue[, user]) used since its period began."""
    start = period_start(rule.period, now)
    return hours_since(
        rule.project, _METRIC[rule.resource], start, now, queue=rule.queue, user=rule.user
    )


def hours_since(
    project: str,
    metric: str,
    start: datetime,
    now: datetime,
    *,
    queue: str | None = None,
    user: str | None = None,
    last_day: date | None = None,
) -> float:
    """Hours of `metric` (gpu, cpu) the project (in one queue, of one user, when named) used
    from `start` on: its settled daily usage since that day, plus what its running tasks
    have used since `start` (settled usage up to `last_day` only, when named). A budget quota
    counts its period this way, an allocation its dates (accounting/allocations.py)."""
    settled = UsageDaily.objects.filter(project__slug=project, metric=metric, day__gte=start.date())
    running = Attempt.objects.filter(
        state=AttemptState.RUNNING, started_at__isnull=False, task__project__slug=project
    )
    if last_day is not None:
        settled = settled.filter(day__lte=last_day)
    if queue is not None:
        settled = settled.filter(queue=queue)
        running = running.filter(task__queue__name=queue)
    if user:
        settled = settled.filter(username=user)
        running = running.filter(task__owner__username=user)
    total_ms = settled.aggregate(s=Sum("quantity"))["s"] or 0
    field = "task__gpus" if metric == "gpu" else "task__cpus"
    for amount, started in running.values_list(field, "started_at"):
        since = max(started, start)
        total_ms += (amount or 0) * max(0, int((now - since).total_seconds() * 1000))
    return total_ms / METRICS[metric].per
