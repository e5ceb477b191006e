"""The one way a task or an attempt changes state: compare-and-set, an event, then the hooks.

Both the portal's services (a user's cancel of a waiting task) and the engine (dispatch,
polls, settling) move tasks through here, so every move is checked against the lifecycle's
transition table (`scheduling/decisions/lifecycle.py`), writes its TaskEvent, and calls the
hooks registered for an end (`scheduling/hooks.py`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling import hooks
from scheduling.decisions import lifecycle
from scheduling.models import TERMINAL_STATES, Attempt, AttemptState, Task, TaskEvent


class TransitionError(Exception):
    pass


def task_set_state(
    *,
    task: Task,
    to: str,
    message: str = "",
    reason: str | None = None,
    fields: dict[str, Any] | None = None,
    settle: bool = True,
) -> bool:
    """Move `task` from the state it was read in to `to`, if nobody moved it meanwhile.

    The update is conditional on the state read (compare-and-set), so two workers racing on
    one task cannot both move it. Returns False when the task had moved on; the caller's view
    of it is stale and it must not act on it. Writes the TaskEvent of the move.

    When the task ends, the task-end hooks run at once (the engine's settles its dependants
    and its workflow); `settle=False` is for the settling loop itself, which works through
    the DAG without recursion.
    """
    frm = task.state
    if not lifecycle.can_move(frm, to):
        raise TransitionError(f"task {task.pk}: {frm} → {to} is not allowed")
    now = timezone.now()
    values: dict[str, Any] = {"state": to, "updated_at": now, **(fields or {})}
    if reason is not None:
        values["reason"] = reason
    if to in TERMINAL_STATES and "ended_at" not in values:
        values["ended_at"] = now
    with transaction.atomic():
        moved = Task.objects.filter(pk=task.pk, state=frm).update(**values)
        if not moved:
            return False
        TaskEvent.objects.create(
            task=task, at=now, from_state=frm, to_state=to, message=message or (reason or "")
        )
    for name, value in values.items():
        setattr(task, name, value)
    if settle and to in TERMINAL_STATES:
        hooks.task_ended(task)
    return True


def attempt_end(
    *,
    task: Task,
    number: int,
    state: str,
    reason: str,
    exit_code: int | None = None,
    ended_at: datetime | None = None,
    nodes: list[str] | None = None,
) -> bool:
    """Record that attempt `number` of `task` ended; the attempt-end hooks run once.

    Conditional on the attempt not having ended yet, so a replayed poll (or a cancel and a
    poll that both saw the end) records it once and calls the hooks once.
    """
    values: dict[str, Any] = {
        "state": state,
        "reason": reason,
        "exit_code": exit_code,
        "ended_at": ended_at or timezone.now(),
    }
    if nodes is not None:
        values["nodes"] = list(nodes)
    ended = [*TERMINAL_STATES, AttemptState.PREEMPTED]
    live = Attempt.objects.filter(task=task, number=number).exclude(state__in=ended)
    if not live.update(**values):
        return False
    attempt = Attempt.objects.get(task=task, number=number)
    hooks.attempt_ended(attempt)
    return True
