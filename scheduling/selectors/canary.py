"""A canary's results beside the current rules', over the tasks submitted since it started."""

from __future__ import annotations

import statistics
from collections import defaultdict
from datetime import datetime
from typing import Any, cast

from django.db.models import Count, Q

from scheduling.models import Canary, Task, TaskState

WAIT_SAMPLE = 20_000


def canary_get(pk: int) -> Canary | None:
    return Canary.objects.filter(pk=pk).first()


def canary_list(limit: int) -> list[Canary]:
    """The newest canaries first."""
    return list(Canary.objects.all()[:limit])


def canary_active() -> Canary | None:
    return Canary.objects.filter(state=Canary.State.ACTIVE).first()


def canary_past(limit: int) -> list[Canary]:
    return list(Canary.objects.exclude(state="active")[:limit])


def canary_results(canary: Canary) -> list[dict[str, Any]]:
    """One row per arm (the current rules, the canary): tasks, where they went, how long they
    waited to start (mean, p95), how many have started, failed, are still waiting."""
    since = Task.objects.filter(submitted_at__gte=canary.started_at)
    if canary.ended_at:
        since = since.filter(submitted_at__lt=canary.ended_at)
    arms = {None: "current rules", canary.pk: f"canary: {canary.name}"}
    since = since.filter(Q(canary__isnull=True) | Q(canary=canary))
    counts = (
        since.order_by()
        .values_list("canary_id", "queue__name")
        .annotate(
            n=Count("id"),
            failed=Count("id", filter=Q(state__in=(TaskState.FAILED, TaskState.TIMEOUT))),
            waiting=Count("id", filter=Q(started_at__isnull=True, ended_at__isnull=True)),
        )
    )
    rows: dict[Any, dict[str, Any]] = {
        arm: {"arm": label, "tasks": 0, "failed": 0, "waiting": 0, "queues": {}, "waits": []}
        for arm, label in arms.items()
    }
    for arm, queue, n, failed, waiting in counts:
        row = rows[arm]
        row["tasks"] += n
        row["failed"] += failed
        row["waiting"] += waiting
        row["queues"][queue] = n
    waits: dict[Any, list[float]] = defaultdict(list)
    started = (
        since.filter(started_at__isnull=False)
        .order_by("-id")
        .values_list("canary_id", "submitted_at", "started_at")[:WAIT_SAMPLE]
    )
    for arm, submitted, began in started:
        waits[arm].append(max(0.0, (cast(datetime, began) - submitted).total_seconds()))
    out = []
    for arm, row in rows.items():
        values = sorted(waits[arm])
        row["started"] = len(values)
        row["mean_wait_s"] = statistics.fmean(values) if values else None
        row["p95_wait_s"] = values[int(round(0.95 * (len(values) - 1)))] if values else None
        row["queues"] = sorted(row["queues"].items())
        del row["waits"]
        out.append(row)
    return out
