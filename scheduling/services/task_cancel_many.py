"""Cancel several tasks at once (the task list's bulk cancel): each through `task_cancel`,
the end hooks of those ended here from one message (docs/console.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.auth.models import User

from portal.errors import ApplicationError
from scheduling import outbox
from scheduling.models import Task
from scheduling.services.tasks import task_cancel


@dataclass(slots=True)
class CancelReport:
    cancelled: list[Task] = field(default_factory=list)  # cancelled, or being cancelled
    refused: list[tuple[Task, str]] = field(default_factory=list)  # and why


def task_cancel_many(*, user: User, tasks: list[Task], others: list[Task]) -> CancelReport:
    """Cancel `tasks` (fetched as ones the user may change); `others` (seen, not theirs to
    change) are reported, never touched."""
    report = CancelReport()
    report.refused = [(t, "only its project's members cancel it") for t in others]
    ended: list[int] = []
    for task in tasks:
        try:
            report.cancelled.append(task_cancel(user=user, task=task, ended=ended))
        except ApplicationError as exc:  # it ended meanwhile: said, not fatal to the rest
            report.refused.append((task, str(exc)))
    outbox.tasks_ended(ended)
    return report
