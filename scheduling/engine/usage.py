"""The backends' own accounting of jobs, for metering and reconciliation (accounting/).

Provided at app start (`scheduling/apps.py`) as the accounting reader of `scheduling.hooks`;
the accounting app reads it through `scheduling.usage`: only the engine talks to backends.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from scheduling.backends import BackendError, Run
from scheduling.engine.registry import get_backend
from scheduling.hooks import AccountingReader, AccountingUnavailable
from scheduling.models import Attempt
from scheduling.selectors import site_view

log = logging.getLogger(__name__)

__all__ = ["READER", "accounted", "runs_of"]


def runs_of(attempts: Sequence[Attempt]) -> dict[int, list[Run] | None]:
    """Attempt id → its job's runs ([] when it never had a job, or never ran), or None when
    the backend has not accounted it yet (still running, or unreachable): asked again later.
    Attempts must come with their task (`select_related("task")`)."""
    found: dict[int, list[Run] | None] = {}
    by_backend: dict[str, list[Attempt]] = {}
    for attempt in attempts:
        if not attempt.backend_id:
            found[attempt.pk] = []
        else:
            by_backend.setdefault(attempt.task.backend, []).append(attempt)
    for alias, group in by_backend.items():
        try:
            usage = get_backend(alias).usage([a.backend_id for a in group])
        except BackendError as exc:
            log.warning(
                "usage of %d job(s) on %s not read (asked again later): %s", len(group), alias, exc
            )
            usage = {}
        for attempt in group:
            found[attempt.pk] = usage.get(attempt.backend_id)
    return found


def accounted(alias: str, start: datetime, end: datetime) -> list[Run]:
    """What backend `alias` accounted for this portal's jobs that ended in [start, end) (on a
    cluster shared with other portals, only this one's). Raises AccountingUnavailable when its
    accounting cannot be read."""
    instance = site_view(fresh=True).instance
    try:
        runs = get_backend(alias).accounted(start, end)
    except BackendError as exc:
        raise AccountingUnavailable(str(exc)) from exc
    return [run for run in runs if run.portal in ("", instance)]


READER = AccountingReader(runs_of=runs_of, accounted=accounted)
