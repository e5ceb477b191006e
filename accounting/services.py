"""Accounting's writes and composed reads: collectors and their samples, a task's usage,
reconciliation on demand (docs/accounting.md)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounting import metrics
from accounting.meter import insert, rate_for, site_day
from accounting.models import Collector, Reconciliation, UsageRecord
from accounting.reconcile import reconcile_pass
from accounting.reports import committed
from portal.errors import ApplicationError, ErrorItem
from portal.models import Project
from scheduling.models import Task

MAX_SAMPLES = 10_000


def collector_create(name: str) -> tuple[Collector, str]:
    """A new collector and its token (shown once; only its digest is kept)."""
    if Collector.objects.filter(name=name).exists():
        raise ApplicationError("a collector of that name exists", field="name", got=name)
    token = secrets.token_urlsafe(32)
    collector = Collector.objects.create(
        name=name,
        token_digest=hashlib.sha256(token.encode()).hexdigest(),
        token_prefix=token[:8],
    )
    return collector, token


def samples_ingest(*, collector: Collector, samples: Any) -> dict[str, int]:
    """Store a collector's samples (storage in GB-days, network in GB) as usage records,
    priced; a sample id seen before is not stored again. All or nothing on bad input."""
    if not isinstance(samples, list) or not samples:
        raise ApplicationError(
            "a non-empty list of samples", field="samples", got=type(samples).__name__
        )
    if len(samples) > MAX_SAMPLES:
        raise ApplicationError(
            f"at most {MAX_SAMPLES} samples a request", field="samples", got=len(samples)
        )
    errors: list[ErrorItem] = []
    projects = {
        p.slug: p
        for p in Project.objects.filter(
            slug__in=[
                s.get("project")
                for s in samples
                if isinstance(s, dict) and isinstance(s.get("project"), str)
            ]
        )
    }
    parsed = []
    for i, sample in enumerate(samples):
        where = f"samples[{i}]"
        if not isinstance(sample, dict):
            errors.append(ErrorItem(where, "an object", type(sample).__name__))
            continue
        sid = sample.get("id")
        if not isinstance(sid, str) or not 0 < len(sid) <= 100:
            errors.append(ErrorItem(f"{where}.id", "a string of 1 to 100 characters", sid))
        project = projects.get(sample.get("project", ""))
        if project is None:
            errors.append(ErrorItem(f"{where}.project", "a project's slug", sample.get("project")))
        metric = sample.get("metric")
        if metric not in metrics.SAMPLED:
            errors.append(ErrorItem(f"{where}.metric", "storage or network", metric))
        quantity = _decimal(sample.get("quantity"))
        if quantity is None or quantity < 0:
            errors.append(
                ErrorItem(
                    f"{where}.quantity",
                    "a number of GB-days or GB, 0 or more",
                    sample.get("quantity"),
                )
            )
        at = _moment(sample.get("at"))
        if at is None:
            errors.append(ErrorItem(f"{where}.at", "an ISO time or date", sample.get("at")))
        user = None
        if sample.get("user") is not None:
            user = User.objects.filter(username=sample.get("user")).first()
            if user is None:
                errors.append(ErrorItem(f"{where}.user", "a username", sample.get("user")))
        # A sample with a problem is reported above and all are refused below.
        if (
            isinstance(sid, str)
            and isinstance(metric, str)
            and project is not None
            and quantity is not None
            and at is not None
        ):
            parsed.append((sid, project, metric, quantity, at, user))
    if errors:
        raise ApplicationError(errors[0].message, errors=errors)

    for _ in range(3):  # a concurrent request with the same ids: count again
        keys = {f"collector:{collector.name}:{p[0]}" for p in parsed}
        known = set(UsageRecord.objects.filter(key__in=keys).values_list("key", flat=True))
        records = []
        seen = set(known)
        for sid, project, metric, quantity, at, user in parsed:
            key = f"collector:{collector.name}:{sid}"
            if key in seen:
                continue
            seen.add(key)
            amount = metrics.to_base(quantity, metric)
            rate = rate_for(None, metric, at)
            records.append(
                UsageRecord(
                    key=key,
                    metric=metric,
                    quantity=amount,
                    charge=metrics.charge_micros(amount, metric, rate.price) if rate else 0,
                    rate=rate,
                    project=project,
                    user=user,
                    source="collector",
                    backend=f"collector:{collector.name}"[:63],
                    job_id=sid[:64],
                    started_at=at,
                    ended_at=at,
                    day=site_day(at),
                )
            )
        try:
            with transaction.atomic():
                insert(records)
        except IntegrityError:
            continue
        return {"recorded": len(records), "already": len(parsed) - len(records)}
    raise ApplicationError(
        "samples are being stored by another request; send them again", status=409
    )


def task_usage(task: Task) -> dict[str, list[dict[str, Any]]]:
    """A task's billed records (settled) and its running attempt's usage so far (committed)."""
    settled = []
    for record in UsageRecord.objects.filter(task=task).select_related("attempt", "rate"):
        metric = metrics.METRICS[record.metric]
        settled.append(
            {
                "attempt": record.attempt.number if record.attempt else None,
                "metric": record.metric,
                "unit": metric.unit,
                "quantity": metrics.shown(record.quantity, record.metric).quantize(
                    Decimal("0.000001")
                ),
                "charge": (Decimal(record.charge) / metrics.MICROS).quantize(Decimal("0.000001")),
                "currency": record.rate.currency if record.rate else "",
                "ended_at": record.ended_at,
            }
        )
    settled.sort(key=lambda r: (r["attempt"] or 0, r["metric"]))
    running = committed(None, task=task)
    return {
        "settled": settled,
        "committed": [
            {
                "metric": m,
                "unit": metrics.METRICS[m].unit,
                "quantity": metrics.shown(q, m).quantize(Decimal("0.000001")),
            }
            for m, q in sorted(running.items())
        ],
    }


def reconcile_now() -> list[Reconciliation]:
    """Meter what is left and reconcile every backend over the recent window, now."""
    started = timezone.now()
    reconcile_pass(started)
    return list(Reconciliation.objects.filter(ran_at__gte=started).order_by("backend"))


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        try:
            moment = datetime.combine(date.fromisoformat(value), time(), tzinfo=UTC)
        except ValueError:
            return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
