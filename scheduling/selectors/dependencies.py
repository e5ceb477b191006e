"""Reads of a task's dependencies: may its dependants run? (the rule is in
`decisions/dependencies.py`; this walks the stored DAG for it)."""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.decisions.dependencies import dependency_verdict
from scheduling.models import Task


def upstream(task: Task) -> Iterable[Task]:
    """A task's dependencies as the verdict reads them (for its walk through skip tasks)."""
    return task.depends_on.only("id", "state", "fail_action")


def verdict(dep: Task) -> bool | None:
    """True: its dependants may run; False: they never will; None: not decided yet."""
    return dependency_verdict(dep, upstream)
