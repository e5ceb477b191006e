"""Metering: an ended attempt's usage written once, from its backend's own accounting.

The attempt-end hook asks for it a few seconds after the attempt ends; the meter pass
(`SWITCHYARD_METER_MS`) picks up every ended attempt still unmetered, e.g. while slurmdbd
was down. An attempt is metered in one transaction: a `Metered` row (its primary key is the
attempt), its usage records (each with a unique key) and the daily roll-up — so a replay, or
two workers at once, write it once (docs/accounting.md).
"""

from __future__ import annotations

import logging
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import cast

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounting import metrics
from accounting.models import Metered, Rate, UsageDaily, UsageRecord
from config.bulk import update_rows
from scheduling import usage
from scheduling.models import Attempt
from scheduling.usage import Run

log = logging.getLogger(__name__)
BATCH = 500
METER_TASK = "accounting.meter"  # accounting/tasks.py


# Slurm records a job's end in slurmdbd a moment after it ends; a preempted job is
# cancelled just after its attempt ends.
AFTER_END_S = 3


def after_attempts_end(attempts: list[Attempt]) -> None:
    """The attempt-end hook: meter them shortly after this transaction commits, in messages
    of at most BATCH attempts."""
    pks = [attempt.pk for attempt in attempts]
    for at in range(0, len(pks), BATCH):
        chunk = pks[at : at + BATCH]
        transaction.on_commit(
            partial(
                usage.send,
                METER_TASK,
                (chunk,),
                countdown=AFTER_END_S,
                what=f"metering of {chunk}",
            )
        )


def meter(attempt_ids: Iterable[int]) -> int:
    """Meter these attempts where they have ended and their backend has accounted them.
    Returns how many records were written.

    All of them in one transaction, the rates read once (a poll's ends come in one message);
    should one have been metered meanwhile (a replay, another worker), each is written in a
    transaction of its own instead, so that the others are still written once.
    """
    attempts = list(
        Attempt.objects.filter(pk__in=list(attempt_ids), ended_at__isnull=False, metered=None)
        .select_related("task__project", "task__owner", "task__queue__pool")
        .order_by("pk")
    )
    if not attempts:
        return 0
    runs = usage.runs_of(attempts)
    ready = [(a, found) for a in attempts if (found := runs.get(a.pk)) is not None]
    if not ready:
        return 0
    rates = RateBook()
    built = [_build(attempt, found, rates) for attempt, found in ready]
    try:
        with transaction.atomic():
            Metered.objects.bulk_create([b.metered for b in built])
            # update_rows wants the same fields in every row: one UPDATE per set of fields
            # (CPU time alone, CPU time and GPU use).
            by_fields: dict[tuple[str, ...], list[tuple[int, dict[str, object]]]] = {}
            for b in built:
                if b.measured:
                    by_fields.setdefault(tuple(b.measured), []).append((b.attempt.pk, b.measured))
            for rows in by_fields.values():
                update_rows(Attempt, rows)
            insert([r for b in built for r in b.records])
    except IntegrityError:
        return sum(_write_one(b) for b in built)
    return sum(len(b.records) for b in built)


def meter_pass(now: datetime | None = None) -> dict[str, int]:
    """Every attempt that ended within the backends' accounting window and is not metered."""
    now = now or timezone.now()
    since = now - timedelta(days=7)
    pending = list(
        Attempt.objects.filter(ended_at__gte=since, metered=None)
        .order_by("ended_at")
        .values_list("pk", flat=True)[: BATCH * 10]
    )
    written = 0
    for start in range(0, len(pending), BATCH):
        written += meter(pending[start : start + BATCH])
    left = Attempt.objects.filter(ended_at__gte=since, metered=None).count()
    return {"records": written, "unmetered": left}


def write(attempt: Attempt, runs: list[Run]) -> int:
    """Write the attempt's records; 0 if it was metered already (by a replay or another
    worker)."""
    return _write_one(_build(attempt, runs, RateBook()))


@dataclass(slots=True)
class _Built:
    metered: Metered
    attempt: Attempt
    # What the job really used (CPU time, GPU use), for the attempt's row: the fields to set.
    measured: dict[str, object]
    records: list[UsageRecord]


def _build(attempt: Attempt, runs: list[Run], rates: RateBook) -> _Built:
    """The rows that meter one attempt, not yet written."""
    task = attempt.task
    used = run_usage(runs, attempt.pull_seconds)
    amounts = metrics.quantities(task.type, used)
    # An attempt is metered once it has ended: one of its times is set.
    ended = cast(
        datetime, max((r.ended_at for r in runs if r.ended_at), default=None) or attempt.ended_at
    )
    started = min((r.started_at for r in runs if r.started_at), default=None)
    started = started or attempt.started_at or ended
    job_id = ",".join(sorted({r.job_id for r in runs}))[:64]
    source = _source(task.backend)
    measured = measured_use(runs, used)  # what it really used, for the over-request advice
    for field, value in measured.items():
        setattr(attempt, field, value)
    records = []
    for metric, quantity in sorted(amounts.items()):
        rate = rates.valid(task.queue_id, metric, ended)
        records.append(
            UsageRecord(
                key=f"{attempt.key}:{metric}",
                metric=metric,
                quantity=quantity,
                charge=metrics.charge_micros(quantity, metric, rate.price) if rate else 0,
                rate=rate,
                project=task.project,
                user=task.owner,
                queue=task.queue.name,
                pool=task.queue.pool.name,
                task_type=task.type,
                task=task,
                attempt=attempt,
                backend=task.backend,
                job_id=job_id,
                source=source,
                started_at=started,
                ended_at=ended,
                day=site_day(ended),
            )
        )
    return _Built(
        Metered(attempt=attempt, runs=len(runs), records=len(amounts)),
        attempt,
        measured,
        records,
    )


def measured_use(runs: list[Run], used: list[metrics.RunUsage]) -> dict[str, object]:
    """The attempt's fields of what its job really used: its CPU time over the runs that
    measured it, and the GPU use of its last run that sampled its GPUs."""
    fields: dict[str, object] = {}
    timed = [(r, u) for r, u in zip(runs, used, strict=True) if r.cpu_ms is not None]
    if timed:
        fields["cpu_ms"] = sum(r.cpu_ms or 0 for r, _ in timed)
        fields["cpu_elapsed_ms"] = sum(u.elapsed_ms for _, u in timed)
    gpu = next((r.gpu for r in reversed(runs) if r.gpu is not None), None)
    if gpu is not None:
        fields.update(
            gpu_samples=gpu.samples,
            gpu_busy=gpu.gpus_busy,
            gpu_util_mean=gpu.util_mean,
            gpu_util_peak=gpu.util_peak,
            gpu_memory_peak_mib=gpu.memory_peak_mib,
        )
    return fields


def run_usage(runs: list[Run], pull_seconds: float | None) -> list[metrics.RunUsage]:
    """What the runs are metered for: allocated × elapsed, less the attempt's image pull where
    the backend's elapsed time includes it (Slurm's Prolog pulls inside the allocation; the
    local backend's job waits for its image before it starts). The pull is not charged."""
    used = [metrics.RunUsage(r.cpus, r.gpus, r.memory_mib, r.elapsed_ms) for r in runs]
    if pull_seconds and any(r.pull_in_elapsed for r in runs):
        return metrics.without_pull(used, round(pull_seconds * 1000))
    return used


def _write_one(built: _Built) -> int:
    """One attempt in a transaction of its own; 0 if it was metered already."""
    try:
        with transaction.atomic():
            built.metered.save(force_insert=True)
            if built.measured:
                Attempt.objects.filter(pk=built.attempt.pk).update(**built.measured)
            insert(built.records)
    except IntegrityError:
        return 0  # metered meanwhile: nothing written twice
    return len(built.records)


def insert(records: list[UsageRecord]) -> None:
    """Store new records and add them to the daily roll-up (inside the caller's transaction;
    a record whose key exists raises IntegrityError, and the caller rolls back)."""
    if not records:
        return
    UsageRecord.objects.bulk_create(records)
    add_to_daily(records)


def add_to_daily(records: list[UsageRecord]) -> None:
    groups: dict[tuple, list[int]] = {}
    for r in records:
        username = r.user.get_username() if r.user else ""
        key = (r.day, r.project_id, username, r.queue, r.pool, r.task_type, r.area, r.metric)
        total = groups.setdefault(key, [0, 0, 0])
        total[0] += r.quantity
        total[1] += r.charge
        total[2] += 1
    table = connection.ops.quote_name(UsageDaily._meta.db_table)
    columns = "day, project_id, username, queue, pool, task_type, area, metric"
    sql = (
        f"INSERT INTO {table} ({columns}, quantity, charge, records) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
        f"ON CONFLICT ({columns}) DO UPDATE SET "
        f"quantity = {table}.quantity + excluded.quantity, "
        f"charge = {table}.charge + excluded.charge, "
        f"records = {table}.records + excluded.records"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(*key, *total) for key, total in groups.items()])


def rate_for(queue_id: int | None, metric: str, at: datetime) -> Rate | None:
    """The rate valid at `at`: the queue's own, else the one for every queue."""
    valid = Rate.objects.filter(metric=metric, valid_from__lte=at).filter(
        Q(valid_until__isnull=True) | Q(valid_until__gt=at)
    )
    own = valid.filter(queue_id=queue_id).order_by("-valid_from").first() if queue_id else None
    return own or valid.filter(queue__isnull=True).order_by("-valid_from").first()


class RateBook:
    """`rate_for` over rates read once (the table is a price list: small), for a batch."""

    def __init__(self) -> None:
        self._rates: list[Rate] | None = None

    def valid(self, queue_id: int | None, metric: str, at: datetime) -> Rate | None:
        if self._rates is None:
            self._rates = list(Rate.objects.order_by("-valid_from", "-pk"))
        candidates = [
            r
            for r in self._rates
            if r.metric == metric
            and r.valid_from <= at
            and (r.valid_until is None or r.valid_until > at)
        ]
        if queue_id:
            for rate in candidates:  # the latest first
                if rate.queue_id == queue_id:
                    return rate
        return next((r for r in candidates if r.queue_id is None), None)


def site_day(moment: datetime):
    return moment.astimezone(zoneinfo.ZoneInfo(settings.SWITCHYARD_SITE_TIMEZONE)).date()


def _source(alias: str) -> str:
    """The backend's kind (local, slurm …) from its configured class."""
    config = settings.COMPUTE_BACKENDS.get(alias, {})
    return str(config.get("BACKEND", alias)).rsplit(".", 1)[-1].removesuffix("Backend").lower()
