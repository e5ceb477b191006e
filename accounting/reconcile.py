"""Reconciliation: the portal's usage records against a backend's own accounting
(Slurm: `sacct`) for a period — what is missing, extra, duplicated or off by more than a
tolerance (docs/accounting.md).

A job belongs to the period its last run ended in. Runs are read from a day before the
period, so a job Slurm requeued across the boundary is compared whole. A backend whose
accounting cannot be read (slurmdbd down) gives a `failed` reconciliation and an alert; the
next run, once it is back, compares again from scratch.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone

from accounting import metrics
from accounting.meter import meter_pass, run_usage
from accounting.models import Reconciliation, UsageRecord
from scheduling import usage
from scheduling.models import Alert, Attempt, Pool
from scheduling.usage import raise_alert

log = logging.getLogger(__name__)
MAX_DETAILS = 500
LOOKBACK = timedelta(days=1)


def reconcile(
    alias: str, start: datetime, end: datetime, *, tolerance: Decimal | None = None
) -> Reconciliation:
    tolerance = Decimal(settings.SWITCHYARD_RECONCILE_TOLERANCE) if tolerance is None else tolerance
    try:
        runs = usage.accounted(alias, start - LOOKBACK, end)
    except usage.AccountingUnavailable as exc:
        result = Reconciliation.objects.create(
            backend=alias,
            period_start=start,
            period_end=end,
            outcome=Reconciliation.Outcome.FAILED,
            tolerance=tolerance,
            error=f"the backend's accounting could not be read: {exc}",
        )
        _alert(result)
        return result

    by_key: dict[str, list] = defaultdict(list)
    for run in runs:
        by_key[run.key].append(run)
    keys = [k for k, rs in by_key.items() if start <= max(r.ended_at for r in rs) < end]
    # Instance-minutes depend on the task's type; an image's pull is not metered (meter.py).
    known = {
        key: (kind, pull)
        for key, kind, pull in Attempt.objects.filter(key__in=keys).values_list(
            "key", "task__type", "pull_seconds"
        )
    }
    theirs = {
        key: metrics.quantities(
            known.get(key, ("", None))[0],
            run_usage(
                sorted(by_key[key], key=lambda r: r.started_at or r.ended_at or start),
                known.get(key, ("", None))[1],
            ),
        )
        for key in keys
    }
    job_ids = {key: sorted({r.job_id for r in by_key[key]}) for key in keys}

    ours: dict[str, dict[str, int]] = defaultdict(dict)
    copies: dict[tuple[str, str], int] = {}
    rows = (
        UsageRecord.objects.filter(backend=alias, ended_at__gte=start, ended_at__lt=end)
        .exclude(source="collector")
        .values("key", "metric")
        .annotate(total=Sum("quantity"), n=Count("id"))
    )
    for row in rows.iterator():
        key = row["key"].rsplit(":", 1)[0]
        ours[key][row["metric"]] = row["total"]
        copies[(key, row["metric"])] = row["n"]
    # Billed just outside the period but accounted inside it (clock edges): look them up.
    stray = [k for k in theirs if k not in ours]
    for row in (
        UsageRecord.objects.filter(
            backend=alias, key__in=[f"{k}:{m}" for k in stray for m in metrics.COMPUTE]
        )
        .values("key", "metric")
        .annotate(total=Sum("quantity"), n=Count("id"))
    ):
        key = row["key"].rsplit(":", 1)[0]
        ours[key][row["metric"]] = row["total"]
        copies[(key, row["metric"])] = row["n"]

    details: list[dict] = []
    counts = dict.fromkeys(("missing", "extra", "duplicate", "mismatched"), 0)

    def note(kind: str, key: str, **fields) -> None:
        counts[kind] += 1
        if len(details) < MAX_DETAILS:
            details.append({"kind": kind, "key": key, **fields})

    for key, amounts in theirs.items():
        if len(job_ids[key]) > 1:
            note("duplicate", key, job_ids=job_ids[key], what="one attempt ran as several jobs")
        if key not in ours:
            if amounts:
                note("missing", key, job_ids=job_ids[key], theirs=amounts)
            continue
        for metric in sorted(set(amounts) | set(ours[key])):
            a, b = ours[key].get(metric, 0), amounts.get(metric, 0)
            if abs(a - b) > tolerance * max(abs(b), 1):
                note("mismatched", key, metric=metric, ours=a, theirs=b, job_ids=job_ids[key])
    for key in ours:
        if key not in theirs and not _outside(key, by_key, start, end):
            note("extra", key, ours=ours[key])
    for (key, metric), n in copies.items():
        if n > 1:
            note("duplicate", key, metric=metric, what=f"{n} records")

    outcome = (
        Reconciliation.Outcome.DIFFERENCES if any(counts.values()) else Reconciliation.Outcome.CLEAN
    )
    result = Reconciliation.objects.create(
        backend=alias,
        period_start=start,
        period_end=end,
        outcome=outcome,
        tolerance=tolerance,
        jobs=len(theirs),
        details=details,
        **counts,
    )
    if outcome != Reconciliation.Outcome.CLEAN:
        _alert(result)
    return result


def reconcile_pass(now: datetime | None = None) -> dict[str, str]:
    """Meter what is left, then reconcile every backend over the recent window."""
    now = now or timezone.now()
    meter_pass(now)
    start = now - timedelta(hours=settings.SWITCHYARD_RECONCILE_WINDOW_HOURS)
    outcomes = {}
    for alias in sorted(set(Pool.objects.values_list("backend", flat=True))):
        outcomes[alias] = reconcile(alias, start, now).outcome
    return outcomes


def _outside(key: str, by_key: dict, start: datetime, end: datetime) -> bool:
    """The backend has the job, ending outside the period (a clock edge, not an extra)."""
    runs = by_key.get(key)
    if not runs:
        return False
    return not start <= max(r.ended_at for r in runs) < end


def _alert(result: Reconciliation) -> None:
    """Alert when the outcome is new: not on every pass of a lasting problem."""
    previous = (
        Reconciliation.objects.filter(backend=result.backend, ran_at__lt=result.ran_at)
        .exclude(pk=result.pk)
        .order_by("-ran_at", "-id")
        .first()
    )
    if previous is not None and (previous.outcome, previous.differences, previous.error[:60]) == (
        result.outcome,
        result.differences,
        result.error[:60],
    ):
        return
    if result.outcome == Reconciliation.Outcome.FAILED:
        subject = f"usage of {result.backend} not reconciled: {result.error}"[:200]
    else:
        subject = (
            f"usage of {result.backend} differs from its accounting: {result.missing} missing, "
            f"{result.extra} extra, {result.duplicate} duplicate, {result.mismatched} mismatched"
        )
    raise_alert(
        Alert.Kind.USAGE,
        subject,
        f"{subject}\nPeriod {result.period_start:%Y-%m-%d %H:%M} to "
        f"{result.period_end:%Y-%m-%d %H:%M}; see the Reconciliation page.",
    )
