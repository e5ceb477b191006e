"""What else happens when an attempt or a task ends, registered at app start.

The state service (`scheduling/states.py`) calls these hooks; it never imports the code that
reacts (workflow settling in the engine, usage metering in accounting). Each app registers
its hook in its `AppConfig.ready()`, so data flows one way and adding a reaction never means
editing the state service.

A hook takes a list: the tasks (or attempts) that ended. Outside `gathered()` it is called at
once with the one that ended; inside, the ends are collected and each hook is called once
with all of them when the block exits — a poll in which a hundred jobs ended releases each
queue's held tasks once and sends one metering message, not a hundred of each.

Hooks run in the process that made the change, after the change is stored, in the order
they were registered (attempt hooks before task hooks). An exception propagates to the
caller (a Celery task then fails and is redelivered, a request answers 500): the change
itself is already stored. A gathered block calls its hooks even when it exits on an
exception, so no stored end misses them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from scheduling.decisions.types import Run

if TYPE_CHECKING:
    from scheduling.models import Attempt, Task

TaskEndHook = Callable[[list["Task"]], Any]
AttemptEndHook = Callable[[list["Attempt"]], Any]

_task_end: list[TaskEndHook] = []
_attempt_end: list[AttemptEndHook] = []
# The ends collected by the open `gathered()` block of this thread (context), if any.
_gathering: ContextVar[tuple[list[Attempt], list[Task]] | None] = ContextVar(
    "switchyard_hooks_gathering", default=None
)


def on_task_end(hook: TaskEndHook) -> TaskEndHook:
    """Call `hook(tasks)` with tasks that reached a terminal state. Registering twice is a
    no-op."""
    if hook not in _task_end:
        _task_end.append(hook)
    return hook


def on_attempt_end(hook: AttemptEndHook) -> AttemptEndHook:
    """Call `hook(attempts)` with backend jobs of tasks that ended (retried ones included)."""
    if hook not in _attempt_end:
        _attempt_end.append(hook)
    return hook


def task_ended(task: Task) -> None:
    gathering = _gathering.get()
    if gathering is not None:
        gathering[1].append(task)
        return
    for hook in list(_task_end):
        hook([task])


def tasks_ended(tasks: Sequence[Task]) -> None:
    """Every task-end hook, once, with these tasks (gathered into an open block, if any)."""
    with gathered():
        for task in tasks:
            task_ended(task)


def attempt_ended(attempt: Attempt) -> None:
    gathering = _gathering.get()
    if gathering is not None:
        gathering[0].append(attempt)
        return
    for hook in list(_attempt_end):
        hook([attempt])


@contextlib.contextmanager
def gathered() -> Iterator[None]:
    """Call the end hooks once, with every end stored inside the block, when it exits.

    Nested blocks gather into the outermost one. The hooks run outside the block: an end they
    cause themselves (a held task refused, say) reaches the hooks at once.
    """
    if _gathering.get() is not None:
        yield
        return
    attempts: list[Attempt] = []
    tasks: list[Task] = []
    token = _gathering.set((attempts, tasks))
    try:
        yield
    finally:
        _gathering.reset(token)
        if attempts:
            for hook in list(_attempt_end):
                hook(attempts)
        if tasks:
            for task_hook in list(_task_end):
                task_hook(tasks)


# -- budgets ------------------------------------------------------------------------------
# Budget quotas (GPU-hours, core-hours per period) need the usage accounting meters; the
# accounting app provides the reader, so scheduling never imports it.
BudgetReader = Callable[[Any, Any], float]
_budget_reader: list[BudgetReader] = []


def provide_budget_reader(reader: BudgetReader) -> BudgetReader:
    """`reader(rule, now)` returns the hours a budget rule's scope used in its period."""
    _budget_reader[:] = [reader]
    return reader


def budget_used(rule: Any, now: Any) -> float:
    """Hours used by a budget rule's scope in its current period (0 with no reader)."""
    return _budget_reader[0](rule, now) if _budget_reader else 0.0


# -- allocations --------------------------------------------------------------------------
# A project's allocation (its granted budget over dates) is accounting's; the accounting app
# provides the reader, and admission holds a task with the reason it gives.
AllocationReader = Callable[[str, int, int, Any], "str | None"]
_allocation_reader: list[AllocationReader] = []


def provide_allocation_reader(reader: AllocationReader) -> AllocationReader:
    """`reader(project, gpus, cpus, now)` returns why such a task of the project waits for
    its allocation (expired, not started, budget spent), or None."""
    _allocation_reader[:] = [reader]
    return reader


def allocation_hold(project: str, gpus: int, cpus: int, now: Any) -> str | None:
    """Why the task waits for the project's allocation; None with no reader."""
    return _allocation_reader[0](project, gpus, cpus, now) if _allocation_reader else None


# Which projects have an allocation at all: read with the site's policy (its short cache), so
# that admitting the work of a project without one costs no query.
_allocated_reader: list[Callable[[], frozenset[str]]] = []


def provide_allocated_projects(
    reader: Callable[[], frozenset[str]],
) -> Callable[[], frozenset[str]]:
    _allocated_reader[:] = [reader]
    return reader


def allocated_projects() -> frozenset[str]:
    """The slugs of the projects that have an allocation (none with no reader)."""
    return _allocated_reader[0]() if _allocated_reader else frozenset()


# -- the backends' accounting -------------------------------------------------------------
# Metering and reconciliation need what the backends themselves accounted of each job; only
# the engine talks to backends, so it provides the reader at app start and accounting reads
# it through `scheduling.usage`, never importing the engine.


class AccountingUnavailable(Exception):
    """A backend's accounting cannot be read now (e.g. slurmdbd is down)."""


@dataclass(frozen=True, slots=True)
class AccountingReader:
    # attempts (with their task) → attempt id → its job's runs, or None: not accounted yet
    runs_of: Callable[[Sequence[Attempt]], dict[int, list[Run] | None]]
    # (alias, start, end) → the runs of this portal's jobs that ended in [start, end);
    # raises AccountingUnavailable
    accounted: Callable[[str, datetime, datetime], list[Run]]


_accounting: list[AccountingReader] = []


def provide_accounting(reader: AccountingReader) -> AccountingReader:
    _accounting[:] = [reader]
    return reader


def accounting() -> AccountingReader:
    """The backends' accounting, as the engine provided it at app start."""
    if not _accounting:
        raise AccountingUnavailable("no reader of the backends' accounting is registered")
    return _accounting[0]


# -- closing the backends -----------------------------------------------------------------
# `manage.py up` closes every backend when it stops (the local backend's launcher goes); the
# engine provides the closer at app start, so the process runner never imports the engine.
_closer: list[Callable[[], None]] = []


def provide_backends_close(close: Callable[[], None]) -> None:
    _closer[:] = [close]


def close_backends() -> None:
    """Close every configured backend, as the engine provided it (nothing without one)."""
    for close in list(_closer):
        close()
