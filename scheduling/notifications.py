"""Mail a task's owner when it ends, if they asked: the descriptor's `notify` (`end` or
`none`), else their own setting (docs/console.md). The mail goes out from a worker, after the
end is committed; a mail that cannot be sent is logged, never an error of the task."""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache

from portal.models import UserSettings
from portal.notify import notify
from scheduling import outbox
from scheduling.models import Task


def wants_mail(tasks: list[Task]) -> list[Task]:
    """The tasks whose owners are to be mailed: each descriptor's `notify`, else the owner's
    setting (one query for all the owners left)."""
    choice = {task.pk: (task.spec or {}).get("notify") for task in tasks}
    owners = {task.owner_id for task in tasks if choice[task.pk] is None}
    mailed = set(
        UserSettings.objects.filter(user_id__in=owners, email_on_task_end=True).values_list(
            "user_id", flat=True
        )
        if owners
        else ()
    )
    return [
        task
        for task in tasks
        if (task.owner_id in mailed if choice[task.pk] is None else choice[task.pk] == "end")
    ]


# How long a task's end is remembered as mailed: a redelivered end message within it sends
# no second mail.
MAILED_FOR_S = 7 * 24 * 3600


def on_tasks_end(tasks: list[Task]) -> None:
    """The task-end hook: publish the mails on commit where the owners want them, once per
    end (the hook run again for the same end, by a redelivered message, publishes none)."""
    for task in wants_mail(tasks):
        ended = task.ended_at.isoformat() if task.ended_at else ""
        if cache.add(f"switchyard-end-mail:{task.pk}:{ended}", 1, timeout=MAILED_FOR_S):
            outbox.notify_end(task.pk)


def send_task_end(task_id: int) -> bool:
    task = Task.objects.select_related("owner", "project", "queue").filter(pk=task_id).first()
    if task is None:
        return False
    base = settings.SWITCHYARD_PUBLIC_URL.rstrip("/")
    lines = [
        f"Task #{task.pk} {task.name} in project {task.project.slug} ended: {task.state}.",
        f"Why: {task.reason}" if task.reason else "",
        f"Exit code: {task.exit_code}" if task.exit_code is not None else "",
        f"Queue: {task.queue.name}; attempts: {task.attempts}.",
        "",
        f"{base}/tasks/{task.pk}/",
        "",
        "You get this because the task's descriptor says `notify: end` or your settings on "
        "the dashboard ask for it.",
    ]
    return notify(
        task.owner,
        f"task #{task.pk} {task.name} {task.state}",
        "\n".join(line for line in lines if line is not None),
    )
