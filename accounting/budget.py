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


def used_hours(rule, now: datetime) -> float:
    """Hours `rule`'s scope (project, queue[, user]) used since its period began."""
    metric = _METRIC[rule.resource]
    start = period_start(rule.period, now)
    settled = UsageDaily.objects.filter(
        project__slug=rule.project, queue=rule.queue, metric=metric, day__gte=start.date()
    )
    running = Attempt.objects.filter(
        state=AttemptState.RUNNING,
        started_at__isnull=False,
        task__project__slug=rule.project,
        task__queue__name=rule.queue,
    )
    if rule.user:
        settled = settled.filter(username=rule.user)
        running = running.filter(task__owner__username=rule.user)
    total_ms = settled.aggregate(s=Sum("quantity"))["s"] or 0
    field = "task__gpus" if metric == "gpu" else "task__cpus"
    for amount, started in running.values_list(field, "started_at"):
        since = max(started, start)
        total_ms += (amount or 0) * max(0, int((now - since).total_seconds() * 1000))
    return total_ms / METRICS[metric].per
