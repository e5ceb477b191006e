"""Predicted runtimes read from the portal's tasks: the last runs of a task's work when it is
queued, a task's own measured runtime, and how far predictions were off per queue.

A run counts when the task ran in one attempt and ended on its own or by its walltime
(succeeded, failed, timed out): a cancelled run says nothing about how long the work takes,
and a retried task's first start to its end spans the wait between attempts.
docs/predictions.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from django.db.models import Q
from django.utils import timezone

from scheduling.decisions.predict import (
    RECENT,
    PredictionError,
    history_key,
    predict,
    prediction_error,
)
from scheduling.decisions.types import QueuePolicy
from scheduling.models import Task, TaskState
from scheduling.spec import TaskSpec

S = TaskState
RAN = (S.SUCCEEDED, S.FAILED, S.TIMEOUT)
# The per-queue figure: predictions of the tasks that ended this recently, the latest this
# many of each queue (a page load reads at most that many rows per queue).
ERROR_WINDOW = timedelta(days=7)
ERROR_SAMPLE = 1000


class Queued(Protocol):
    """What a job being queued says of itself (a backend's submit request)."""

    @property
    def user(self) -> str: ...
    @property
    def project(self) -> str: ...
    @property
    def spec(self) -> TaskSpec: ...
    @property
    def queue(self) -> QueuePolicy: ...


def _measured() -> Q:
    return Q(state__in=RAN, attempts=1, started_at__isnull=False, ended_at__isnull=False)


def _seconds(start: datetime | None, end: datetime | None) -> float:
    """A measured run's length (the queries keep only rows with both times)."""
    if start is None or end is None:
        raise ValueError(f"a measured run: expected a start and an end, got {start}, {end}")
    return max(0.0, (end - start).total_seconds())


def measured_runtime_s(task: Task) -> float | None:
    """How long `task` ran, when that is a measure of its work (see above); else None."""
    if task.state not in RAN or task.attempts != 1 or not (task.started_at and task.ended_at):
        return None
    return _seconds(task.started_at, task.ended_at)


def recent_runs(keys: Iterable[str]) -> dict[str, list[tuple[float, float | None]]]:
    """The last `RECENT` measured runs of each work key, oldest first ([] when none): each
    its runtime and the walltime it asked (None: it asked none).

    A query per distinct key, each reading at most `RECENT` rows by the history index: a
    dispatch batch holds few distinct works, and a key with years of runs costs the same.
    """
    found: dict[str, list[tuple[float, float | None]]] = {}
    for key in sorted(set(keys)):
        if not key:
            found[key] = []
            continue
        rows = (
            Task.objects.filter(_measured(), runtime_key=key)
            .order_by("-ended_at")
            .values_list("started_at", "ended_at", "spec__walltime_s")[:RECENT]
        )
        found[key] = [
            (_seconds(start, end), float(asked) if asked else None)
            for start, end, asked in reversed(rows)
        ]
    return found


def recent_runtimes(keys: Iterable[str]) -> dict[str, list[float]]:
    """The last `RECENT` measured runtimes of each work key, oldest first ([] when none)."""
    return {key: [r for r, _ in runs] for key, runs in recent_runs(keys).items()}


def runtime_predictions(wanted: Sequence[tuple[str, int | None]]) -> list[int | None]:
    """For each (work key, walltime in s or None), its predicted runtime in whole seconds, or
    None when the work has no measured run yet."""
    recent = recent_runs(key for key, _ in wanted)
    predictions: list[int | None] = []
    for key, walltime_s in wanted:
        runs = recent[key]
        predicted = predict([r for r, _ in runs], walltime_s, [a for _, a in runs])
        predictions.append(None if predicted is None else round(predicted))
    return predictions


def runtime_predictions_for(
    requests: Sequence[Queued],
) -> tuple[list[str], list[int | None]]:
    """Each job's work key and predicted runtime as it is queued, capped by its walltime (or
    its queue's longest). It plans; the walltime still ends the job."""
    keys = [history_key(r.user, r.project, r.spec) for r in requests]
    walltimes = [r.spec.walltime_s or r.queue.max_walltime_s for r in requests]
    return keys, runtime_predictions(list(zip(keys, walltimes, strict=True)))


def queue_prediction_errors(
    queue_ids: Iterable[int], *, now: datetime | None = None
) -> dict[int, PredictionError]:
    """Per queue id: the error of the predictions of its tasks measured in the last
    `ERROR_WINDOW` (the latest `ERROR_SAMPLE`); count 0 where none was."""
    since = (now or timezone.now()) - ERROR_WINDOW
    errors = {}
    for queue_id in queue_ids:
        rows = (
            Task.objects.filter(
                _measured(),
                queue_id=queue_id,
                predicted_runtime_s__isnull=False,
                ended_at__gte=since,
            )
            .order_by("-ended_at")
            .values_list("predicted_runtime_s", "started_at", "ended_at")[:ERROR_SAMPLE]
        )
        errors[queue_id] = prediction_error(
            (float(p or 0), _seconds(start, end)) for p, start, end in rows
        )
    return errors
