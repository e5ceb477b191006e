"""What else happens when an attempt or a task ends, registered at app start.

The state service (`scheduling/states.py`) calls these hooks; it never imports the code that
reacts (workflow settling in the engine, usage metering in accounting). Each app registers
its hook in its `AppConfig.ready()`, so data flows one way and adding a reaction never means
editing the state service.

Hooks run in the process that made the change, after the change is stored, in the order
they were registered. An exception propagates to the caller (a Celery task then fails and
is redelivered, a request answers 500): the change itself is already stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scheduling.models import Attempt, Task

TaskEndHook = Callable[["Task"], Any]
AttemptEndHook = Callable[["Attempt"], Any]

_task_end: list[TaskEndHook] = []
_attempt_end: list[AttemptEndHook] = []


def on_task_end(hook: TaskEndHook) -> TaskEndHook:
    """Call `hook(task)` whenever a task reaches a terminal state. Registering twice is a no-op."""
    if hook not in _task_end:
        _task_end.append(hook)
    return hook


def on_attempt_end(hook: AttemptEndHook) -> AttemptEndHook:
    """Call `hook(attempt)` whenever a backend job of a task ends (retried ones included)."""
    if hook not in _attempt_end:
        _attempt_end.append(hook)
    return hook


def task_ended(task: Task) -> None:
    for hook in list(_task_end):
        hook(task)


def attempt_ended(attempt: Attempt) -> None:
    for hook in list(_attempt_end):
        hook(attempt)


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
