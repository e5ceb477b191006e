"""Messages to the engine's workers, published once the transaction that asks for them commits.

Services and the engine name the Celery task they want by its registered name
(`scheduling/tasks.py` declares them), so nothing here imports the engine: the portal stays
above the engine, and the engine below its own Celery interface.

A broker that is down never turns a stored change into an error: every message has a
periodic sweep behind it that finds the rows it was about (docs/architecture.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)

DISPATCH = "scheduling.dispatch"
DISPATCH_MANY = "scheduling.dispatch_many"
CANCEL = "scheduling.cancel"
NODES = "scheduling.nodes_apply"
CAPACITY = "scheduling.capacity_pass"
NOTIFY_END = "scheduling.notify_task_end"
SIMULATIONS = "scheduling.simulations"


def dispatch(task_id: int, *, countdown: float = 0) -> None:
    """Dispatch the task (after `countdown` seconds) once the current transaction commits."""
    _on_commit(DISPATCH, (task_id,), countdown=countdown, what=f"dispatch of task {task_id}")


def dispatch_many(task_ids: Sequence[int]) -> None:
    ids = list(task_ids)
    _on_commit(DISPATCH_MANY, (ids,), what=f"dispatch of {len(ids)} tasks")


def cancel(task_ids: Sequence[int]) -> None:
    """Carry out the cancel requests of these tasks: one message, however many tasks."""
    ids = list(task_ids)
    if ids:
        _on_commit(CANCEL, (ids,), what=f"cancel of {len(ids)} task(s)")


def send(name: str, args: tuple[Any, ...], *, countdown: float = 0, what: str = "") -> None:
    """Publish now (outside a transaction, e.g. from a periodic task)."""
    try:
        task = current_app.tasks[name]  # looked up when sent: the registry, not an import
        if countdown:
            task.apply_async(args, countdown=countdown)
        else:
            task.apply_async(args)
    except Exception:  # noqa: BLE001 - any broker failure; the sweep is the safety net
        log.warning("could not enqueue %s; the sweep will", what or name, exc_info=True)


def notify_end(task_id: int) -> None:
    """Mail the owner that the task ended, once the transaction commits (no sweep: a lost
    message is a lost mail, never a lost change)."""
    _on_commit(NOTIFY_END, (task_id,), what=f"mail about task {task_id}")


def simulations() -> None:
    """Wake a worker to run the queued what-if runs, once the transaction commits (the beat
    sends the same message every minute: a lost one only delays a run)."""
    _on_commit(SIMULATIONS, (), what="the queued simulations")


def _on_commit(name: str, args: tuple[Any, ...], *, countdown: float = 0, what: str) -> None:
    transaction.on_commit(lambda: send(name, args, countdown=countdown, what=what))
