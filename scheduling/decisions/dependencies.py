"""When a dependant may run: the verdict a dependency's end gives it (docs/workflows.md).

Pure: the graph is read through the `upstream` accessor the caller passes, so the engine
walks the database with it and the simulator its own in-memory DAG.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from scheduling.decisions.lifecycle import BAD_ENDS, CANCELLED, SKIPPED, SUCCEEDED


class DependencyNode(Protocol):
    """What a verdict reads of a task: its id, state and fail action."""

    @property
    def pk(self) -> int: ...

    @property
    def state(self) -> str: ...

    @property
    def fail_action(self) -> str: ...


# The caller's own node type (a Task row, a simulated task): upstream takes and gives it.
N = TypeVar("N", bound=DependencyNode)


def dependency_verdict(dep: N, upstream: Callable[[N], Iterable[N]]) -> bool | None:
    """True: the dependant may run; False: it never will; None: not decided yet."""
    if dep.state in (SUCCEEDED, SKIPPED):
        return True
    if dep.state not in BAD_ENDS:
        return None
    if dep.fail_action != "skip":
        return False
    # fail_action skip lets the dependants run as if it had succeeded (a user's cancel
    # included), unless the task never ran because an upstream abort cancelled it: an abort
    # stops everything downstream, through skip tasks too.
    return not (dep.state == CANCELLED and cancelled_by_abort(dep, upstream))


def cancelled_by_abort(task: N, upstream: Callable[[N], Iterable[N]]) -> bool:
    """Whether an abort upstream of this cancelled skip task is what cancelled it.

    Walks up through cancelled skip tasks only (iteratively: chains may be long).
    """
    seen = {task.pk}
    todo = [task]
    while todo:
        for dep in upstream(todo.pop()):
            if dep.pk in seen:
                continue
            seen.add(dep.pk)
            if dep.state in BAD_ENDS and dep.fail_action != "skip":
                return True
            if dep.state == CANCELLED:
                todo.append(dep)
    return False
