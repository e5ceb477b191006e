"""Accounting's writes and composed reads: collectors and their samples, a task's usage,
reconciliation on demand (docs/accounting.md)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import ROUND_FLOOR, Decimal, InvalidOperation
from functools import partial
from typing import Any

from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounting import metrics
from accounting.meter import insert, rate_for, site_day
from accounting.models import Collector, UsageRecord
from accounting.reports import committed
from portal.errors import ApplicationError, ErrorItem
from portal.models import Project, UserSettings
from scheduling import usage
from scheduling.models import Task

MAX_SAMPLES = 10_000


def collector_authenticate(token: bytes) -> Collector | None:
    """The active collector whose token this is (its last contact noted), or None."""
    digest = hashlib.sha256(token).hexdigest()
    collector = Collector.objects.filter(token_digest=digest, active=True).first()
    if collector is not None:
        Collector.objects.filter(pk=collector.pk).update(last_seen=timezone.now())
    return collector


def collector_create(name: str) -> tuple[Collector, str]:
    """A new collector and its token (shown once; only its digest is kept)."""
    if Collector.objects.filter(name=name).exists():
        raise ApplicationError("a collector of that name exists", field="name", got=name)
    token = secrets.token_urlsafe(32)
    while token.startswith("-"):  # a command-line option's value must not look like one
        token = secrets.token_urlsafe(32)
    collector = Collector.objects.create(
        name=name,
        token_digest=hashlib.sha256(token.encode()).hexdigest(),
        token_prefix=token[:8],
    )
    return collector, token


@dataclass(frozen=True, slots=True)
class _Sample:
    sid: str
    project: Project
    user: User | None
    metric: str
    amount: int  # base units
    started: datetime
    ended: datetime
    area: str
    size: int | None  # bytes measured (a storage sample in the bytes form)
    field: str  # the field its quantity came from, and what it said, for an error about it
    given: Any


# The largest bytes, quantity (base units) and charge (millionths) one sample may come to:
# each is stored in a 64-bit column, with room for a day's records to be summed.
MAX_BYTES = 2**62
MAX_QUANTITY = 2**62
MAX_CHARGE = 2**62


def samples_ingest(*, collector: object, samples: Any) -> dict[str, int]:
    """Store a collector's samples as usage records, priced; a sample id seen before is not
    stored again. All or nothing on bad input.

    `collector` is what the request authenticated as: anything but a collector is refused.
    Storage comes as `bytes` held for `seconds` (what `manage.py collector storage` sends),
    or as a `quantity` of GB-days (the older form); either names its `area` or not. Network
    comes as a `quantity` of GB."""
    if not isinstance(collector, Collector):
        raise ApplicationError("samples come from a collector only", status=403)
    if not isinstance(samples, list) or not samples:
        raise ApplicationError(
            "a non-empty list of samples", field="samples", got=type(samples).__name__
        )
    if len(samples) > MAX_SAMPLES:
        raise ApplicationError(
            f"at most {MAX_SAMPLES} samples a request", field="samples", got=len(samples)
        )
    given = [s for s in samples if isinstance(s, dict)]
    projects = {
        p.slug: p
        for p in Project.objects.filter(
            slug__in=[s["project"] for s in given if isinstance(s.get("project"), str)]
        )
    }
    users = {
        u.username: u
        for u in User.objects.filter(
            username__in=[s["user"] for s in given if isinstance(s.get("user"), str)]
        )
    }
    areas = {a.name for a in usage.storage_areas()}
    errors: list[ErrorItem] = []
    parsed = []
    for i, sample in enumerate(samples):
        one = _sample(f"samples[{i}]", sample, projects, users, areas, errors)
        if one is not None:
            parsed.append(one)
    if errors:
        raise ApplicationError(errors[0].message, errors=errors)

    for _ in range(3):  # a concurrent request with the same ids: count again
        keys = {f"collector:{collector.name}:{p.sid}" for p in parsed}
        known = set(UsageRecord.objects.filter(key__in=keys).values_list("key", flat=True))
        records = []
        seen = set(known)
        for p in parsed:
            key = f"collector:{collector.name}:{p.sid}"
            if key in seen:
                continue
            seen.add(key)
            rate = rate_for(None, p.metric, p.started)
            charge = metrics.charge_micros(p.amount, p.metric, rate.price) if rate else 0
            if rate is not None and charge > MAX_CHARGE:
                raise ApplicationError(
                    f"a quantity whose charge at {rate.price} {rate.currency} per "
                    f"{metrics.METRICS[p.metric].unit.removesuffix('s')} is at most "
                    f"{MAX_CHARGE} millionths",
                    field=p.field,
                    got=p.given,
                )
            records.append(
                UsageRecord(
                    key=key,
                    metric=p.metric,
                    quantity=p.amount,
                    charge=charge,
                    rate=rate,
                    project=p.project,
                    user=p.user,
                    source="collector",
                    backend=f"collector:{collector.name}"[:63],
                    job_id=p.sid[:64],
                    started_at=p.started,
                    ended_at=p.ended,
                    day=site_day(p.started),
                    area=p.area,
                    bytes=p.size,
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


def _sample(
    where: str,
    sample: Any,
    projects: dict[str, Project],
    users: dict[str, User],
    areas: set[str],
    errors: list[ErrorItem],
) -> _Sample | None:
    """One sample checked, or None with its problems added to `errors`."""
    if not isinstance(sample, dict):
        errors.append(ErrorItem(where, "an object", type(sample).__name__))
        return None
    count = len(errors)
    sid = sample.get("id")
    if not isinstance(sid, str) or not 0 < len(sid) <= 100:
        errors.append(ErrorItem(f"{where}.id", "a string of 1 to 100 characters", sid))
    slug = sample.get("project")
    project = projects.get(slug) if isinstance(slug, str) else None
    if project is None:
        errors.append(ErrorItem(f"{where}.project", "a project's slug", sample.get("project")))
    metric = sample.get("metric")
    if metric not in metrics.SAMPLED:
        errors.append(ErrorItem(f"{where}.metric", "storage or network", metric))
    at = _moment(sample.get("at"))
    if at is None:
        errors.append(ErrorItem(f"{where}.at", "an ISO time or date", sample.get("at")))
    user = None
    if sample.get("user") is not None:
        user = users.get(sample["user"]) if isinstance(sample["user"], str) else None
        if user is None:
            errors.append(ErrorItem(f"{where}.user", "a username", sample.get("user")))
    area = sample.get("area")
    if area is not None and metric != "storage":
        errors.append(ErrorItem(f"{where}.area", "no area: only storage is by area", area))
    elif area is not None and (not isinstance(area, str) or area not in areas):
        errors.append(
            ErrorItem(f"{where}.area", f"a storage area: one of {', '.join(sorted(areas))}", area)
        )
    amount, seconds, size = _amount(where, sample, metric, errors)
    if len(errors) > count:
        return None
    assert isinstance(sid, str) and project is not None and at is not None
    assert isinstance(metric, str) and amount is not None
    field = "bytes" if size is not None else "quantity"
    return _Sample(
        sid,
        project,
        user,
        metric,
        amount,
        at,
        at + timedelta(seconds=seconds),
        area or "",
        size,
        f"{where}.{field}",
        sample.get(field),
    )


# A storage sample stands for at most this long (a collector's period).
MAX_SAMPLE_SECONDS = 31 * 24 * 3600


def _amount(
    where: str, sample: dict, metric: Any, errors: list[ErrorItem]
) -> tuple[int | None, int, int | None]:
    """The sample's quantity in base units, the seconds it stands for, the bytes measured."""
    if metric == "storage" and ("bytes" in sample or "seconds" in sample):
        size = _whole(sample.get("bytes"), 0, MAX_BYTES)
        seconds = _whole(sample.get("seconds"), 1, MAX_SAMPLE_SECONDS)
        if "quantity" in sample:
            errors.append(
                ErrorItem(
                    f"{where}.quantity",
                    "no quantity beside bytes and seconds (it is computed from them)",
                    sample.get("quantity"),
                )
            )
        if size is None:
            errors.append(
                ErrorItem(
                    f"{where}.bytes",
                    f"a whole number of bytes from 0 to {MAX_BYTES}",
                    sample.get("bytes"),
                )
            )
        if seconds is None:
            errors.append(
                ErrorItem(
                    f"{where}.seconds",
                    f"a whole number of seconds from 1 to {MAX_SAMPLE_SECONDS}",
                    sample.get("seconds"),
                )
            )
        if size is None or seconds is None:
            return None, 0, None
        amount = metrics.storage_from_bytes(size, seconds)
        if amount > MAX_QUANTITY:
            most = MAX_QUANTITY * 1024 // seconds
            errors.append(
                ErrorItem(
                    f"{where}.bytes",
                    f"at most {most} bytes held for {seconds} seconds "
                    f"(bytes × seconds / 1024 at most {MAX_QUANTITY} KiB-seconds)",
                    size,
                )
            )
            return None, 0, None
        return amount, seconds, size
    for name in ("bytes", "seconds"):
        if name in sample and metric != "storage":
            errors.append(
                ErrorItem(f"{where}.{name}", "only a storage sample has it", sample.get(name))
            )
    quantity = _decimal(sample.get("quantity"))
    if quantity is None or quantity < 0:
        expected = {"storage": "GB-days (or bytes and seconds)", "network": "GB"}.get(
            metric, "GB-days or GB"
        )
        errors.append(
            ErrorItem(
                f"{where}.quantity", f"a number of {expected}, 0 or more", sample.get("quantity")
            )
        )
        return None, 0, None
    if metric not in ("storage", "network"):
        return None, 0, None
    # The most the field may say: its base units fit the quantity column.
    if metric == "storage":
        limit, unit = Decimal(MAX_QUANTITY) / metrics.KIB_SECONDS_PER_GB_DAY, "GB-days"
    else:
        limit, unit = metrics.shown(MAX_QUANTITY, metric), "GB"
    limit = limit.to_integral_value(rounding=ROUND_FLOOR)
    if quantity > limit:
        errors.append(
            ErrorItem(f"{where}.quantity", f"at most {limit} {unit}", sample.get("quantity"))
        )
        return None, 0, None
    if metric == "storage":
        return metrics.storage_from_gb_days(quantity), 0, None
    return metrics.to_base(quantity, metric), 0, None


def _whole(value: Any, least: int, most: int | None) -> int | None:
    """`value` when it is a whole number in [least, most], else None."""
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        return None
    return value if most is None or value <= most else None


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


RECONCILE_NOW = "accounting.reconcile_now"  # the Celery task (accounting/tasks.py)
_RECONCILE_PENDING = "switchyard-accounting-reconcile-pending"
# A reconcile asked for and not finished holds the next ask off this long at most: a lost
# message or a worker that died frees the button then.
RECONCILE_PENDING_S = 15 * 60


@dataclass(frozen=True, slots=True)
class ReconcileStarted:
    """What asking to reconcile now started: a worker reconciles from `since` on; `already`
    when one asked earlier was still queued or running, and this ask started nothing."""

    since: datetime
    already: bool


def reconcile_now() -> ReconcileStarted:
    """Have a worker meter what is left and reconcile every backend over the recent window
    (the backends' accounting, sacct on Slurm, is read there, never in a request). One at a
    time: while one is queued or running, asking again starts nothing."""
    now = timezone.now()
    if not cache.add(_RECONCILE_PENDING, now.isoformat(), timeout=RECONCILE_PENDING_S):
        since = cache.get(_RECONCILE_PENDING)
        return ReconcileStarted(datetime.fromisoformat(since) if since else now, already=True)
    transaction.on_commit(partial(usage.send, RECONCILE_NOW, (), what="reconcile now"))
    return ReconcileStarted(now, already=False)


def reconcile_now_done() -> None:
    """The worker finished the reconcile asked for: the next ask starts another."""
    cache.delete(_RECONCILE_PENDING)


def settings_set_mail_on_end(user: User, wanted: bool) -> None:
    """Whether `user` is mailed when a task of theirs ends (a descriptor's `notify` wins)."""
    UserSettings.objects.update_or_create(user=user, defaults={"email_on_task_end": wanted})


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
