"""Reads with permission checks: the only way views reach tasks and workflows.

Who sees a task: its project's members, the admins of its queue (read only: they answer
"why does it wait"), platform admins. Who changes it (cancel, ask for priority): its
project's members and platform admins. A task a user cannot see does not exist for them (a
404); one they see but may not change is a 403 that says so (docs/console.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404

from portal.errors import ApplicationError
from portal.models import Membership
from portal.parsing import checked_pk
from scheduling.models import Queue, Task, Workflow


def _member_projects(user: User) -> QuerySet:
    return Membership.objects.filter(user_id=user.pk).values("project_id")


def task_list_for_user(user: User) -> QuerySet[Task]:
    """Every task the user may see: the only way views reach tasks."""
    tasks = Task.objects.select_related("project", "queue", "owner")
    if user.is_superuser:
        return tasks
    # Subqueries, not joins: no duplicate rows, no DISTINCT over a large table.
    return tasks.filter(
        Q(project_id__in=_member_projects(user))
        | Q(queue_id__in=Queue.admins.through.objects.filter(user_id=user.pk).values("queue_id"))
    )


def task_list_for_member(user: User) -> QuerySet[Task]:
    """The tasks the user may change: their projects' (everything, for a platform admin)."""
    tasks = Task.objects.select_related("project", "queue", "owner")
    if user.is_superuser:
        return tasks
    return tasks.filter(project_id__in=_member_projects(user))


def task_get_for_user(user: User, pk: int | str, *, change: bool = False) -> Task:
    """One task the user may see (a 404 otherwise); with `change`, one they may also change
    (a 403 when they only see it)."""
    try:
        task = task_list_for_user(user).get(pk=checked_pk(pk))
    except (Task.DoesNotExist, ValueError, TypeError):
        raise Http404("no such task") from None
    if change and not can_change_task(user, task):
        raise PermissionDenied("only the project's members change its tasks")
    return task


def can_change_task(user: User, task: Task) -> bool:
    return bool(
        user.is_superuser
        or Membership.objects.filter(user_id=user.pk, project_id=task.project_id).exists()
    )


def tasks_split_for_change(user: User, ids: Iterable[int]) -> tuple[list[Task], list[Task]]:
    """Of the tasks with these ids that the user sees: those they may change, and those they
    only see (a queue admin's view of other projects' tasks). Ids they cannot see are left
    out, as if they did not exist."""
    seen = list(task_list_for_user(user).filter(pk__in=list(ids)).order_by("-id"))
    if user.is_superuser:
        return seen, []
    mine = set(_member_projects(user).values_list("project_id", flat=True))
    return [t for t in seen if t.project_id in mine], [t for t in seen if t.project_id not in mine]


def tasks_visible_by_ids(user: User, ids: Iterable[int], *, field: str) -> list[Task]:
    """The tasks with these ids, all of which the user must be able to see.

    An id the user cannot see is refused like one that does not exist (400 naming the field).
    """
    ids = list(ids)
    if not ids:
        return []
    found = {t.pk: t for t in task_list_for_member(user).filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ApplicationError(
            f"no task #{missing[0]} among your projects' tasks", field=field, got=missing[0]
        )
    return [found[i] for i in ids]


def workflow_list_for_user(user: User) -> QuerySet[Workflow]:
    """Workflows are their projects' (and a platform admin's)."""
    flows = Workflow.objects.select_related("project", "owner")
    if user.is_superuser:
        return flows
    return flows.filter(project_id__in=_member_projects(user))


def can_see_workflow(user: User, workflow_id: int | None) -> bool:
    """Whether the workflow's page would answer for the user (its link is shown only then:
    a queue admin sees a task of their queue, not the rest of its workflow)."""
    if workflow_id is None:
        return False
    return workflow_list_for_user(user).filter(pk=workflow_id).exists()


def workflow_get_for_user(user: User, pk: int | str) -> Workflow:
    try:
        return workflow_list_for_user(user).get(pk=checked_pk(pk))
    except (Workflow.DoesNotExist, ValueError, TypeError):
        raise Http404("no such workflow") from None


def workflow_dependency_pairs(workflow: Workflow) -> list[tuple[int, int]]:
    """(task id, id of a task it depends on) for the workflow's tasks, in the order the
    dependencies were written in the descriptor. Id pairs: a model instance per edge was most
    of a big workflow's time."""
    pairs = Task.depends_on.through.objects.filter(from_task__workflow=workflow)
    return list(pairs.order_by("to_task_id").values_list("from_task_id", "to_task_id"))
