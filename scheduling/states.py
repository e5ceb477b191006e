"""The one way a task or an attempt changes state: compare-and-set, an event, then the hooks.

Both the portal's services (a user's cancel of a waiting task) and the engine (dispatch,
polls, settling) move tasks through here, so every move is checked against the lifecycle's
transition table (`scheduling/decisions/lifecycle.py`), writes its TaskEvent, and calls the
hooks registered for an end (`scheduling/hooks.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from config.bulk import update_rows
from config.metrics import instruments
from scheduling import hooks
from scheduling.decisions import lifecycle
from scheduling.models import TERMINAL_STATES, Attempt, AttemptState, Task, TaskEvent, TaskState

log = logging.getLogger(__name__)


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
    and its workflow); `settle=False` leaves them out: the settling loop works through the
    DAG without recursion, and a service, which runs in a web request, publishes
    `outbox.tasks_ended` instead, so a worker runs them (no engine code in a request).
    """
    move = Move(task, to, message=message, reason=reason, fields=fields)
    return tasks_set_state([move], settle=settle)[0]


@dataclass(frozen=True, slots=True)
class Move:
    """One task's move for `tasks_set_state` (the arguments of `task_set_state`)."""

    task: Task
    to: str
    message: str = ""
    reason: str | None = None
    fields: dict[str, Any] | None = None


def tasks_set_state(moves: Sequence[Move], *, settle: bool = True) -> list[bool]:
    """`task_set_state` for many tasks in one transaction: a compare-and-set each, their
    events in one insert. Returns, per move, whether it happened."""
    for move in moves:
        if not lifecycle.can_move(move.task.state, move.to):
            raise TransitionError(
                f"task {move.task.pk}: {move.task.state} → {move.to} is not allowed"
            )
    now = timezone.now()
    planned = []
    for move in moves:
        values: dict[str, Any] = {"state": move.to, "updated_at": now, **(move.fields or {})}
        if move.reason is not None:
            values["reason"] = move.reason
        if move.to in TERMINAL_STATES and "ended_at" not in values:
            values["ended_at"] = now
        planned.append((move, move.task.state, values))
    groups: dict[tuple[str, frozenset[str]], list[tuple[Move, dict[str, Any]]]] = {}
    for move, frm, values in planned:
        groups.setdefault((frm, frozenset(values)), []).append((move, values))
    moved_ids: set[int] = set()
    with transaction.atomic():
        for (frm, _), group in groups.items():
            moved_ids |= _compare_and_set(frm, group)
        done = [move.task.pk in moved_ids for move, _, _ in planned]
        events = [
            TaskEvent(
                task=move.task,
                at=now,
                from_state=frm,
                to_state=move.to,
                message=move.message or (move.reason or ""),
            )
            for (move, frm, _), moved in zip(planned, done, strict=True)
            if moved
        ]
        if len(events) == 1:
            events[0].save(force_insert=True)
        elif events:
            TaskEvent.objects.bulk_create(events)
    ended = []
    for (move, frm, values), moved in zip(planned, done, strict=True):
        if moved:
            _record_latency(move.task, frm, move.to, values)
            for name, value in values.items():
                setattr(move.task, name, value)
            _log_move(move, frm)
            if move.to in TERMINAL_STATES:
                ended.append(move.task)
    if settle and ended:
        hooks.tasks_ended(ended)
    return done


_LATENCY_FIELDS = ("submitted_at", "started_at", "type", "backend", "attempts")


def _record_latency(task: Task, frm: str, to: str, values: dict[str, Any]) -> None:
    """The dispatch latency at a task's first hand-over to its backend, the start latency
    at its first start; from the values read, never a query (a field not loaded is left)."""
    if to not in (TaskState.QUEUED, TaskState.RUNNING) or not instruments.enabled():
        return
    loaded = vars(task)  # a deferred field is not there (what get_deferred_fields reads)
    if any(name not in loaded for name in _LATENCY_FIELDS) or task.submitted_at is None:
        return
    if to == TaskState.QUEUED and frm == TaskState.PENDING and not task.attempts:
        waited = values["updated_at"] - task.submitted_at
        instruments.dispatched(task.type, task.backend, waited.total_seconds())
    elif to == TaskState.RUNNING and task.started_at is None:
        waited = (values.get("started_at") or values["updated_at"]) - task.submitted_at
        instruments.started(task.type, task.backend, waited.total_seconds())


def _log_move(move: Move, frm: str) -> None:
    """One line per move, with the task's id and its job's (docs/operations.md, "Logs")."""
    if log.isEnabledFor(logging.INFO):
        task = move.task
        log.info(
            "task %s: %s → %s: %s",
            task.pk,
            frm,
            move.to,
            move.message or move.reason or "",
            # Read only where loaded: a line never queries (dispatch loads few fields).
            extra={"task_id": task.pk, "job_id": task.__dict__.get("backend_id") or None},
        )


def _compare_and_set(frm: str, group: list[tuple[Move, dict[str, Any]]]) -> set[int]:
    """Write each move's values to its task if it is still in state `frm` (inside the
    caller's transaction); the ids of those moved. Many tasks take two queries: their rows
    locked, then one UPDATE whose values differ per task where they must (CASE ... WHEN)."""
    if len(group) == 1:
        [(move, values)] = group
        moved = Task.objects.filter(pk=move.task.pk, state=frm).update(**values)
        return {move.task.pk} if moved else set()
    ids = sorted(move.task.pk for move, _ in group)
    # Locked in id order (no deadlock between two batches); SQLite's transactions here take
    # the write lock at BEGIN (settings: IMMEDIATE), so the rows cannot move meanwhile.
    locked = set(
        Task.objects.select_for_update()
        .filter(pk__in=ids, state=frm)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if not locked:
        return locked
    update_rows(Task, [(move.task.pk, values) for move, values in group if move.task.pk in locked])
    return locked


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
    """Record that attempt `number` of `task` ended (`attempts_end` of one)."""
    return attempts_end([AttemptEnd(task, number, state, reason, exit_code, ended_at, nodes)])[0]


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """One attempt's end for `attempts_end` (the arguments of `attempt_end`)."""

    task: Task
    number: int
    state: str
    reason: str
    exit_code: int | None = None
    ended_at: datetime | None = None
    nodes: list[str] | None = None


# An attempt ended this way has ended: its end is recorded once.
_ATTEMPT_ENDED = [*TERMINAL_STATES, AttemptState.PREEMPTED]


def attempts_end(ends: Sequence[AttemptEnd]) -> list[bool]:
    """Record that these attempts ended, in one transaction; the attempt-end hooks run once
    for each. Returns, per end, whether it was recorded now.

    Conditional on the attempt not having ended yet, so a replayed poll (or a cancel and a
    poll that both saw the end) records it once and calls the hooks once.
    """
    now = timezone.now()
    live = _end_one(ends[0], now) if len(ends) == 1 else _end_many(ends, now)
    for attempt in live:
        hooks.attempt_ended(attempt)
    recorded = {(attempt.task_id, attempt.number) for attempt in live}
    return [(end.task.pk, end.number) in recorded for end in ends]


def _end_values(end: AttemptEnd, now: datetime, *, kept: list[str] | None = None) -> dict[str, Any]:
    """What an end writes on its attempt: the nodes only where the end names them (else the
    `kept` ones, where given)."""
    values: dict[str, Any] = {
        "state": end.state,
        "reason": end.reason,
        "exit_code": end.exit_code,
        "ended_at": end.ended_at or now,
    }
    nodes = end.nodes if end.nodes is not None else kept
    if nodes is not None:
        values["nodes"] = list(nodes)
    return values


def _end_one(end: AttemptEnd, now: datetime) -> list[Attempt]:
    """One end: a conditional UPDATE (one statement, no transaction) and the attempt read."""
    attempt = Attempt.objects.filter(task=end.task, number=end.number)
    if not attempt.exclude(state__in=_ATTEMPT_ENDED).update(**_end_values(end, now)):
        return []
    return [attempt.get()]


def _end_many(ends: Sequence[AttemptEnd], now: datetime) -> list[Attempt]:
    """Many ends: the live attempts locked and read at once, their ends written by one
    update."""
    wanted = {(end.task.pk, end.number): end for end in ends}
    with transaction.atomic():
        live = [
            attempt
            for attempt in Attempt.objects.select_for_update()
            .filter(task_id__in={task_id for task_id, _ in wanted})
            .exclude(state__in=_ATTEMPT_ENDED)
            .order_by("pk")
            if (attempt.task_id, attempt.number) in wanted
        ]
        rows = []
        for attempt in live:
            # Every row writes the same fields (one UPDATE): the nodes kept where not named.
            values = _end_values(wanted[attempt.task_id, attempt.number], now, kept=attempt.nodes)
            for name, value in values.items():
                setattr(attempt, name, value)
            rows.append((attempt.pk, values))
        update_rows(Attempt, rows)
    return live
