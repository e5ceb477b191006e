"""Accounting's reads for its pages and others': reconciliations, the rate card, the projects
a report may name, a project's storage against its areas' soft quotas (docs/storage.md)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.db.models import Count, Max, Min, Q, QuerySet

from accounting.metrics import METRICS
from accounting.models import Rate, Reconciliation, UsageRecord
from portal.models import Project
from scheduling.models import Attempt
from scheduling.usage import storage_areas

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


def size_text(size: int) -> str:
    """Bytes as people read them: `12.3 GiB`, `10 GiB`, `512 B`."""
    value, unit = float(size), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    shown = f"{value:.1f}".removesuffix(".0") if unit else str(size)
    return f"{shown} {_UNITS[unit]}"


@dataclass(frozen=True, slots=True)
class StorageWarning:
    """A project's folder of an area holds more than the area's soft quota."""

    area: str
    used: int  # bytes, as last measured
    quota: int
    measured_at: datetime

    @property
    def text(self) -> str:
        return f"{self.area}: {size_text(self.used)} of {size_text(self.quota)} soft quota"


def storage_warnings(project: Project) -> list[StorageWarning]:
    """The project areas with a soft quota whose folder of the project's held more than it
    when last measured (a collector's latest storage sample of that folder)."""
    found = []
    for area in storage_areas():
        if area.owner != "project" or area.quota_bytes is None:
            continue
        latest = (
            UsageRecord.objects.filter(
                project=project, area=area.name, metric="storage", user__isnull=True
            )
            .exclude(bytes=None)
            .order_by("-started_at", "-id")
            .values_list("bytes", "started_at")
            .first()
        )
        if latest is not None and latest[0] is not None and latest[0] > area.quota_bytes:
            found.append(StorageWarning(area.name, latest[0], area.quota_bytes, latest[1]))
    return found


def reconciliations_recent(limit: int) -> list[Reconciliation]:
    """The last `limit` reconciliations, newest first."""
    return list(Reconciliation.objects.all()[:limit])


def _one(unit: str) -> str:
    """The unit a price is for: a core-hour, a GiB-day …"""
    return unit[:-1] if unit.endswith(("hours", "minutes", "days")) else unit


def rate_card(now: datetime) -> list[dict]:
    """Every rate in force now or later, per queue (none: every queue without its own) and
    metric, with the unit it prices; the oldest first within each."""
    rates = (
        Rate.objects.filter(Q(valid_until__isnull=True) | Q(valid_until__gt=now))
        .select_related("queue")
        .order_by("queue__name", "metric", "valid_from")
    )
    return [
        {
            "queue": rate.queue.name if rate.queue else "",
            "metric": rate.metric,
            "unit": _one(METRICS[rate.metric].unit),
            "price": rate.price.normalize(),
            "currency": rate.currency,
            "valid_from": rate.valid_from,
            "valid_until": rate.valid_until,
            "in_force": rate.valid_from <= now,
            "note": rate.note,
        }
        for rate in rates
    ]


def report_projects(user: User, *, sees_all: bool) -> list[str]:
    """The project slugs a usage report of `user` may be filtered by: every project for
    finance and platform admins (`sees_all`), else their own."""
    projects: QuerySet[Project] = Project.objects.order_by("slug")
    if not sees_all:
        projects = projects.filter(memberships__user=user)
    return list(projects.values_list("slug", flat=True))


@dataclass(frozen=True, slots=True)
class MeteringBacklog:
    """Ended attempts of the accounting window not metered yet, and the oldest one's end."""

    attempts: int
    oldest_end: datetime | None


def metering_backlog(now: datetime) -> MeteringBacklog:
    """One query over the window the meter pass works through (accounting/meter.py)."""
    found = Attempt.objects.filter(ended_at__gte=now - timedelta(days=7), metered=None).aggregate(
        n=Count("id"), oldest=Min("ended_at")
    )
    return MeteringBacklog(found["n"], found["oldest"])


def latest_reconciliations() -> list[Reconciliation]:
    """Each backend's last reconciliation: two queries."""
    last = Reconciliation.objects.order_by().values("backend").annotate(last=Max("id"))
    ids = [row["last"] for row in last]
    return list(Reconciliation.objects.filter(pk__in=ids).order_by("backend"))
