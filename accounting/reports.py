"""Usage reports: grouped, by period, filtered — what the pages, the API and the exports
show (docs/accounting.md).

Finance (the `finance` group) and platform admins see every project; anyone else sees the
projects they are a member of. Grouped reports read the daily roll-up; record-level exports
read the records, streamed. Quantities are shown in the metric's unit (core-hours …) and
charges in the currency, as exact decimals.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import F, QuerySet, Sum
from django.db.models.functions import TruncMonth, TruncWeek
from django.utils import timezone

from accounting.metrics import METRICS, MICROS, RunUsage, quantities
from accounting.models import UsageDaily, UsageRecord
from portal import roles
from portal.errors import ApplicationError, ErrorItem
from scheduling.descriptor import slug_problem
from scheduling.models import Attempt, AttemptState, Pool

# What a report groups by: the name in the URL → the roll-up's column.
GROUPS = {
    "project": "project__slug",
    "user": "username",
    "queue": "queue",
    "pool": "pool",
    "type": "task_type",
    "area": "area",
    "metric": "metric",
}
PERIODS = ("day", "week", "month", "all")
FILTERS = ("project", "user", "queue", "pool", "type", "area", "metric")
MAX_DAYS = 3 * 366


@dataclass(frozen=True, slots=True)
class UsageQuery:
    start: date
    end: date  # inclusive
    group_by: tuple[str, ...] = ("project",)
    period: str = "day"
    filters: Mapping[str, str] = field(default_factory=dict)

    @property
    def by_record(self) -> bool:
        return self.group_by == ("record",)

    def slug(self) -> str:
        """For file names: the period and the filters."""
        parts = [f"{self.start:%Y%m%d}-{self.end:%Y%m%d}", "-".join(self.group_by) or "all"]
        parts.append(self.period)
        parts += [f"{k}-{v}" for k, v in sorted(self.filters.items())]
        return "_".join(_safe(p) for p in parts)

    def params(self) -> dict[str, str]:
        """The query string that gives this query back."""
        return {
            "from": self.start.isoformat(),
            "to": self.end.isoformat(),
            "group_by": ",".join(self.group_by),
            "period": self.period,
            **self.filters,
        }


def parse_query(params: Mapping[str, str], *, today: date | None = None) -> UsageQuery:
    """A report query from URL parameters; every bad one is a 400 naming it."""
    today = today or site_today()
    errors: list[ErrorItem] = []
    start = _date(params, "from", today.replace(day=1), errors)
    end = _date(params, "to", today, errors)
    if start and end and end < start:
        errors.append(ErrorItem("to", "must not be before from", params.get("to")))
    elif start and end and (end - start).days > MAX_DAYS:
        errors.append(ErrorItem("to", f"a report spans at most {MAX_DAYS} days", params.get("to")))
    raw_groups = params.get("group_by", "project")
    groups = tuple(g for g in raw_groups.split(",") if g) if raw_groups not in ("", "none") else ()
    # `record`: no grouping at all, every record (for the exports).
    bad = [g for g in groups if g not in GROUPS] if groups != ("record",) else []
    if bad or len(groups) > 2 or len(set(groups)) != len(groups):
        errors.append(
            ErrorItem(
                "group_by",
                f"up to two of {', '.join(GROUPS)}, comma-separated; none; or record",
                raw_groups[:80],
            )
        )
    period = params.get("period", "day")
    if period not in PERIODS:
        errors.append(ErrorItem("period", f"must be one of {', '.join(PERIODS)}", period[:80]))
    filters = {k: params[k] for k in FILTERS if params.get(k)}
    for name in ("project", "queue", "area"):  # as the portal names them, or no row has them
        if name in filters and (problem := slug_problem(filters[name])) is not None:
            errors.append(ErrorItem(name, problem, filters[name][:80]))
    if "metric" in filters and filters["metric"] not in METRICS:
        errors.append(
            ErrorItem("metric", f"must be one of {', '.join(METRICS)}", filters["metric"][:80])
        )
    if errors:
        raise ApplicationError(errors[0].message, errors=errors)
    return UsageQuery(start, end, groups, period, filters)


def sees_all(user: User) -> bool:
    return roles.sees_all_usage(user)


def daily_for(user: User, q: UsageQuery) -> QuerySet[UsageDaily]:
    rows = UsageDaily.objects.filter(day__gte=q.start, day__lte=q.end)
    if not sees_all(user):
        rows = rows.filter(project__memberships__user=user)
    for name, value in q.filters.items():
        rows = rows.filter(**{GROUPS[name]: value})
    return rows


def report(user: User, q: UsageQuery) -> list[dict[str, Any]]:
    """One row per period, group and metric: quantity (shown unit), charge, records."""
    rows = daily_for(user, q)
    dims = [GROUPS[g] for g in q.group_by if g != "metric"]
    if q.period == "all":
        values = rows.values(*dims, "metric")
    else:
        trunc = {"week": TruncWeek("day"), "month": TruncMonth("day"), "day": F("day")}[q.period]
        values = rows.annotate(bucket=trunc).values("bucket", *dims, "metric")
    grouped = values.order_by().annotate(
        quantity=Sum("quantity"), charge=Sum("charge"), records=Sum("records")
    )
    out = []
    for row in grouped:
        metric = METRICS[row["metric"]]
        item: dict[str, Any] = {}
        if q.period != "all":
            bucket = row["bucket"]
            item["period"] = (bucket.date() if isinstance(bucket, datetime) else bucket).isoformat()
        for g in q.group_by:
            if g != "metric":
                item[g] = row[GROUPS[g]]
        item.update(
            metric=metric.name,
            unit=metric.unit,
            quantity=_shown(row["quantity"], metric.per),
            charge=_money(row["charge"]),
            records=row["records"],
        )
        out.append(item)
    out.sort(key=lambda r: tuple(str(r.get(k, "")) for k in ("period", *q.group_by, "metric")))
    return out


def storage_by_area(user: User, q: UsageQuery) -> list[dict[str, Any]]:
    """Storage over the whole query, per storage area (GiB-hours and charge); "" is the
    samples that named no area."""
    rows = (
        daily_for(user, q)
        .filter(metric="storage")
        .values("area")
        .order_by()
        .annotate(quantity=Sum("quantity"), charge=Sum("charge"), records=Sum("records"))
    )
    per = METRICS["storage"].per
    return sorted(
        (
            {
                "area": row["area"],
                "unit": METRICS["storage"].unit,
                "quantity": _shown(row["quantity"], per),
                "charge": _money(row["charge"]),
                "records": row["records"],
            }
            for row in rows
        ),
        key=lambda r: r["area"],
    )


def totals(user: User, q: UsageQuery) -> list[dict[str, Any]]:
    """Per metric over the whole query: settled (records) beside committed (running work
    so far, not yet billed)."""
    settled = {
        row["metric"]: row
        for row in daily_for(user, q)
        .values("metric")
        .order_by()
        .annotate(quantity=Sum("quantity"), charge=Sum("charge"))
    }
    running = committed(user, q)
    out = []
    for name, metric in METRICS.items():
        row = settled.get(name)
        if row is None and name not in running:
            continue
        out.append(
            {
                "metric": name,
                "unit": metric.unit,
                "settled": _shown(row["quantity"] if row else 0, metric.per),
                "charge": _money(row["charge"] if row else 0),
                "committed": _shown(running.get(name, 0), metric.per),
            }
        )
    return out


def committed(user: User | None, q: UsageQuery | None = None, *, task=None) -> dict[str, int]:
    """What running attempts have used so far (allocation asked × time since they started),
    per metric in base units: shown beside the settled usage until their records arrive."""
    now = timezone.now()
    attempts = Attempt.objects.filter(state=AttemptState.RUNNING, started_at__isnull=False)
    if task is not None:
        attempts = attempts.filter(task=task)
    else:
        assert user is not None, "usage without a task is a user's"
        if not sees_all(user):
            attempts = attempts.filter(task__project__memberships__user=user)
        filters = dict(q.filters) if q else {}
        if "area" in filters:  # running work is in no storage area
            return {}
        lookups = {
            "project": "task__project__slug",
            "user": "task__owner__username",
            "queue": "task__queue__name",
            "pool": "task__queue__pool__name",
            "type": "task__type",
        }
        for name, value in filters.items():
            if name in lookups:
                attempts = attempts.filter(**{lookups[name]: value})
    total: dict[str, int] = {}
    for task_type, spec, started in attempts.values_list("task__type", "task__spec", "started_at"):
        res = spec.get("resources", {}) if isinstance(spec, dict) else {}
        run = RunUsage(
            int(res.get("cpus", 1)),
            int(res.get("gpus", 0)),
            int(res.get("memory_mib", 0)),
            max(0, int((now - cast(datetime, started)).total_seconds() * 1000)),
        )
        for metric, amount in quantities(task_type, [run]).items():
            if q is None or q.filters.get("metric") in (None, metric):
                total[metric] = total.get(metric, 0) + amount
    return total


RECORD_COLUMNS = (
    "ended_at",
    "started_at",
    "project",
    "user",
    "queue",
    "pool",
    "type",
    "metric",
    "quantity",
    "unit",
    "charge",
    "currency",
    "task",
    "attempt",
    "backend",
    "job_id",
    "source",
    "key",
    "area",
    "bytes",
)


def records(user: User, q: UsageQuery) -> Iterator[tuple]:
    """Every record of the query, one tuple per record in RECORD_COLUMNS order, streamed
    from the database in chunks (constant memory)."""
    rows = UsageRecord.objects.filter(day__gte=q.start, day__lte=q.end)
    if not sees_all(user):
        rows = rows.filter(project__memberships__user=user)
    lookups = {
        "project": "project__slug",
        "user": "user__username",
        "queue": "queue",
        "pool": "pool",
        "type": "task_type",
        "area": "area",
        "metric": "metric",
    }
    for name, value in q.filters.items():
        rows = rows.filter(**{lookups[name]: value})
    values = rows.order_by("ended_at", "id").values_list(
        "ended_at",
        "started_at",
        "project__slug",
        "user__username",
        "queue",
        "pool",
        "task_type",
        "metric",
        "quantity",
        "charge",
        "rate__currency",
        "task_id",
        "attempt_id",
        "backend",
        "job_id",
        "source",
        "key",
        "area",
        "bytes",
    )
    for (
        ended,
        started,
        project,
        username,
        queue,
        pool,
        task_type,
        metric,
        quantity,
        charge,
        currency,
        task_id,
        attempt_id,
        backend,
        job_id,
        source,
        key,
        area,
        size,
    ) in values.iterator(chunk_size=5000):
        m = METRICS[metric]
        yield (
            ended,
            started,
            project,
            username or "",
            queue,
            pool,
            task_type,
            metric,
            _shown(quantity, m.per),
            m.unit,
            _money(charge, "0.000001"),
            currency or settings.SWITCHYARD_CURRENCY,  # a record at no charge has no rate
            task_id,
            attempt_id,
            backend,
            job_id,
            source,
            key,
            area,
            size,
        )


def period_label(start: str, period: str) -> str:
    """A period as people name it, from its first day (ISO): "Dec 2026", "week of 30 Nov
    2026", "1 Dec 2026"."""
    day = date.fromisoformat(start)
    if period == "month":
        return day.strftime("%b %Y")
    text = f"{day.day} {day.strftime('%b %Y')}"
    return f"week of {text}" if period == "week" else text


def site_today() -> date:
    return timezone.now().astimezone(zoneinfo.ZoneInfo(settings.SWITCHYARD_SITE_TIMEZONE)).date()


def pool_utilisation(user: User, q: UsageQuery) -> list[dict[str, Any]]:
    """Per pool: core-hours and GPU-hours used against what the pool could give over the
    query's days (its nodes × the hours)."""
    hours = Decimal(((q.end - q.start).days + 1) * 24)
    used = {
        (row["pool"], row["metric"]): row["quantity"]
        for row in daily_for(user, UsageQuery(q.start, q.end, (), "all", {}))
        .filter(metric__in=("cpu", "gpu"))
        .values("pool", "metric")
        .order_by()
        .annotate(quantity=Sum("quantity"))
    }
    out = []
    pools = Pool.objects.order_by("name").annotate(
        cores=Sum("nodes__cpus"), gpus=Sum("nodes__gpus")
    )
    for pool in pools:
        cores, gpus = pool.cores or 0, pool.gpus or 0
        row: dict[str, Any] = {"pool": pool.name}
        for metric, capacity in (("cpu", cores), ("gpu", gpus)):
            amount = _shown(used.get((pool.name, metric), 0), METRICS[metric].per)
            row[f"{metric}_hours"] = amount
            row[f"{metric}_percent"] = (
                (amount * 100 / (capacity * hours)).quantize(Decimal("0.1")) if capacity else None
            )
        out.append(row)
    return out


def _date(params: Mapping[str, str], name: str, default: date, errors: list[ErrorItem]):
    raw = params.get(name)
    if not raw:
        return default
    try:
        return date.fromisoformat(raw)
    except ValueError:
        errors.append(ErrorItem(name, "a date, YYYY-MM-DD", raw[:80]))
        return None


def _shown(quantity: int | None, per: int) -> Decimal:
    return (Decimal(quantity or 0) / per).quantize(Decimal("0.000001"))


def _money(micros: int | None, places: str = "0.01") -> Decimal:
    """Money as shown: rounded half up (charges are kept exact, in millionths)."""
    return (Decimal(micros or 0) / MICROS).quantize(Decimal(places), rounding=ROUND_HALF_UP)


def as_json(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decimals as strings: JSON numbers would turn 0.96 into 0.9599999…"""
    return [{k: str(v) if isinstance(v, Decimal) else v for k, v in row.items()} for row in rows]


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-." else "-" for c in text)[:60]
