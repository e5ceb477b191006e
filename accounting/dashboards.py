"""The dashboards' numbers: a researcher's (their work, quotas, usage, waits, what they
really used) and an operator's (load over time, queue depth, why work waits, preemptions,
leases). Every figure is one grouped query or a bounded read, so the pages stay fast with
100,000 tasks in the database (bench/bench_console.py measures it; docs/console.md).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, cast

from django.contrib.auth.models import User
from django.core.cache import cache
from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from accounting import charts, reports
from portal import roles
from portal.models import Project, UserSettings
from scheduling.models import (
    Attempt,
    AttemptState,
    Hold,
    LoadSample,
    Node,
    NodeLease,
    Queue,
    Task,
    TaskState,
)
from scheduling.usage import (
    WAITING,
    efficiency_report,
    image_caches_for_pools,
    load_now,
    project_quotas,
    task_list_for_member,
)

WAIT_SAMPLE = 5000  # the most recent starts a wait chart is drawn from
SLOW_SECONDS = 60
MAX_POINTS = 288  # points per line over a day: one every 5 minutes


def researcher(user: User) -> dict[str, Any]:
    mine = task_list_for_member(user)
    counts = dict(
        mine.filter(state__in=(*WAITING, TaskState.RUNNING))
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    waiting = list(mine.filter(state__in=WAITING).order_by("submitted_at")[:10])
    projects = Project.objects.filter(memberships__user=user).order_by("slug")
    quotas = [(p.slug, project_quotas(p)) for p in projects]
    settings_row = UserSettings.objects.filter(user_id=user.pk).first()
    # The month's usage, the week's waits and the month's efficiency move slowly: computed at
    # most once a minute per user (the page refreshes every 10 s).
    slow = cast(
        dict[str, Any],
        cache.get_or_set(
            f"switchyard:dashboard:{user.pk}", lambda: _slow_figures(user, mine), SLOW_SECONDS
        ),
    )
    unit = wait_unit(slow["waits"])
    return {
        "running": counts.get(TaskState.RUNNING, 0),
        "waiting_count": sum(counts.get(s, 0) for s in WAITING),
        "waiting": waiting,
        "quotas": quotas,
        "email_on_task_end": bool(settings_row and settings_row.email_on_task_end),
        **slow,
        "waits": shown_waits(slow["waits"], unit),
        "wait_unit": unit[0],
        "figures": {"waits": charts.waits(slow["waits"], unit)},
    }


def _slow_figures(user: User, mine) -> dict[str, Any]:
    now = timezone.now()
    today = timezone.localdate()
    month = reports.UsageQuery(today.replace(day=1), today, ("project",), "all")
    started = list(
        mine.filter(started_at__gte=now - timedelta(days=7))
        .order_by("-started_at")
        .values_list("type", "submitted_at", "started_at")[:WAIT_SAMPLE]
    )
    return {
        "usage": reports.totals(user, month),
        "waits": wait_stats(started),
        "efficiency": efficiency_report(mine, now - timedelta(days=30))[:10],
        "computed_at": now,
    }


def wait_stats(started: list[tuple[str, Any, Any]]) -> list[dict[str, Any]]:
    """Per type: how many started, mean and 95th percentile wait in seconds."""
    by_type: dict[str, list[float]] = defaultdict(list)
    for kind, submitted, began in started:
        by_type[kind].append(max(0.0, (began - submitted).total_seconds()))
    out = []
    for kind, values in sorted(by_type.items()):
        values.sort()
        p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
        out.append(
            {"type": kind, "n": len(values), "mean_s": statistics.fmean(values), "p95_s": p95}
        )
    return out


def wait_unit(stats: list[dict[str, Any]]) -> tuple[str, int]:
    """One unit for the waits' chart and table alike, fitting the longest: s, min or h."""
    longest = max((row["p95_s"] for row in stats), default=0.0)
    return ("s", 1) if longest < 120 else ("min", 60) if longest < 7200 else ("h", 3600)


def shown_waits(stats: list[dict[str, Any]], unit: tuple[str, int]) -> list[dict[str, Any]]:
    return [
        {**row, "mean": row["mean_s"] / unit[1], "p95": row["p95_s"] / unit[1]} for row in stats
    ]


def operator_queues(user: User):
    queues = Queue.objects.select_related("pool").order_by("name")
    if not roles.is_platform_admin(user):
        queues = queues.filter(pk__in=roles.administered_queue_ids(user))
    return list(queues)


def site(user: User, queues: list[Queue]) -> dict[str, Any]:
    now = timezone.now()
    ids = [q.pk for q in queues]
    pools = {q.pool_id: q.pool for q in queues}
    capacity: dict[int, Mapping[str, Any]] = {
        row["pool_id"]: row
        for row in Node.objects.filter(pool_id__in=pools)
        .order_by()
        .values("pool_id")
        .annotate(cpus=Sum("cpus"), gpus=Sum("gpus"), nodes=Count("id"))
    }
    load = load_now(ids)
    names = {q.pk: q.name for q in queues}
    now_rows = [
        {"queue": names[q], "waiting": w, "running": r, "cpus": c, "gpus": g}
        for q, (w, r, c, g) in sorted(load.items(), key=lambda kv: names.get(kv[0], ""))
        if q in names
    ]
    samples = list(
        LoadSample.objects.filter(queue_id__in=ids, at__gte=now - timedelta(hours=24))
        .order_by("at")
        .values_list("at", "queue_id", "waiting", "cpus_busy", "gpus_busy")
    )
    reasons = (
        Task.objects.filter(queue_id__in=ids, state__in=WAITING)
        .order_by()
        .values_list("state", "hold")
        .annotate(n=Count("id"))
    )
    preempted = (
        Attempt.objects.filter(
            state=AttemptState.PREEMPTED,
            ended_at__gte=now - timedelta(days=7),
            task__queue_id__in=ids,
        )
        .annotate(day=TruncDate("ended_at"))
        .order_by()
        .values_list("day", "task__type")
        .annotate(n=Count("id"))
    )
    leases = list(
        NodeLease.objects.filter(Q(pool_id__in=pools) | Q(queue_id__in=ids))
        .filter(Q(state=NodeLease.State.ACTIVE) | Q(ends_at__gte=now - timedelta(days=7)))
        .select_related("pool", "queue")
        .prefetch_related("nodes")
        .order_by("starts_at")[:50]
    )
    breakdown = [(reason_label(state, hold), n) for state, hold, n in reasons]
    return {
        "now": now_rows,
        "capacity": [
            {
                "pool": pools[p].name,
                **{k: capacity.get(p, {}).get(k, 0) for k in ("cpus", "gpus", "nodes")},
            }
            for p in sorted(pools, key=lambda p: pools[p].name)
        ],
        "reasons": sorted(breakdown, key=lambda r: -r[1]),
        "leases": leases,
        # Images are metered: what each node cache holds and what pulls into it moved.
        "image_caches": image_caches_for_pools(list(pools)),
        "preemptions": sum(n for _, _, n in preempted),
        "figures": {
            "depth": charts.queue_depth(_thin(samples), names),
            "utilisation": charts.utilisation_over_time(
                _thin(samples), {q.pk: q.pool_id for q in queues}, pools, capacity
            ),
            "reasons": charts.reasons(breakdown),
            "preemptions": charts.preemptions(list(preempted)),
            "leases": charts.leases(leases, now),
        },
    }


def reason_label(state: str, hold: str) -> str:
    if hold:
        return f"held: {Hold(hold).label.lower()}"
    if state == TaskState.QUEUED:
        return "queued: waiting for room in the backend"
    if state == TaskState.PENDING:
        return "pending: being dispatched"
    return "waiting"


def _thin(samples: list[tuple]) -> list[tuple]:
    """At most MAX_POINTS moments (every k-th sample time), all queues of each kept."""
    moments = sorted({row[0] for row in samples})
    if len(moments) <= MAX_POINTS:
        return samples
    step = -(-len(moments) // MAX_POINTS)
    keep = set(moments[::step])
    return [row for row in samples if row[0] in keep]
