"""The portal's door to a task's backend job: carry out cancel requests; housekeeping.

A user's cancel of a task that has a backend job is stored as a request
(`scheduling/services/tasks.py`); a worker carries it out here: the job is cancelled in its
backend, then the task. A workflow's cancel is one message for all its jobs. A request whose
message was lost is found by the sweep, like a lost dispatch.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from scheduling.backends import BackendError, BackendUnavailable
from scheduling.engine.follow import SCHEDULER_UNREACHABLE
from scheduling.engine.registry import get_backend
from scheduling.models import ACTIVE_STATES, Pool, Task, TaskState
from scheduling.states import attempt_end, task_set_state

log = logging.getLogger(__name__)
S = TaskState


class CancelRetry(Exception):
    """A backend could not be reached to cancel a job; try these tasks again later."""

    def __init__(self, task_ids: list[int], message: str) -> None:
        super().__init__(message)
        self.task_ids = task_ids


def cancel_requested(task_ids: Iterable[int]) -> int:
    """Carry out the cancel requests of these tasks. Returns how many tasks it cancelled.

    Idempotent: a task that has ended meanwhile, or whose request was carried out already,
    is left alone. Raises CancelRetry naming the tasks whose backend was unreachable.
    """
    again: list[int] = []
    unreachable = ""
    done = 0
    for task_id in task_ids:
        try:
            done += _cancel_one(task_id)
        except BackendUnavailable as exc:
            again.append(task_id)
            unreachable = str(exc)
    if again:
        raise CancelRetry(again, unreachable)
    return done


def _cancel_one(task_id: int) -> int:
    for _ in range(5):  # the poll may move the task meanwhile (queued → running → …)
        task = Task.objects.filter(pk=task_id).first()
        if task is None or task.is_terminal or task.cancel_requested_at is None:
            return 0
        who = task.cancel_requested_by or "a user"
        if task.state in ACTIVE_STATES and task.backend_id:
            try:
                get_backend(task.backend).cancel(task.backend_id)
            except BackendUnavailable as exc:
                Task.objects.filter(pk=task.pk, state=task.state).update(
                    reason=f"cancelling: {SCHEDULER_UNREACHABLE} ({exc}); retrying",
                    updated_at=timezone.now(),
                )
                raise
            except BackendError as exc:
                # Refused, not unreachable: say so; the sweep asks again later.
                Task.objects.filter(pk=task.pk, state=task.state).update(
                    reason=f"cancelling: the backend refused the cancel ({exc}); retrying",
                    updated_at=timezone.now(),
                )
                ids = {"task_id": task.pk, "job_id": task.backend_id}
                log.warning("cancel of %s refused: %s", task.backend_id, exc, extra=ids)
                return 0
        number, active = task.attempts, task.state in ACTIVE_STATES
        if task_set_state(task=task, to=S.CANCELLED, reason=f"cancelled by {who}"):
            if active:
                attempt_end(task=task, number=number, state=S.CANCELLED, reason="cancelled")
            return 1
    return 0


def sweep_cancels() -> list[int]:
    """Tasks whose cancel request is older than the grace period and still not carried out."""
    stale = timezone.now() - timedelta(seconds=settings.SWITCHYARD_PENDING_GRACE_SECONDS)
    return list(
        Task.objects.filter(state__in=ACTIVE_STATES, cancel_requested_at__lt=stale).values_list(
            "pk", flat=True
        )[:1000]
    )


def housekeep() -> int:
    """Let every backend the site's pools use clean up after ended jobs (e.g. the local
    backend's retention of job folders). Returns how many things they removed."""
    removed = 0
    for alias in Pool.objects.order_by().values_list("backend", flat=True).distinct():
        removed += get_backend(alias).housekeep()
    return removed
