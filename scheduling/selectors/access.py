"""Reads with permission checks: the only way views reach tasks and workflows.

An object outside the user's projects does not exist for them: a 404, never a 403.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404

from portal.errors import ApplicationError
from scheduling.models import Task, Workflow


def task_list_for_user(user: AbstractBaseUser) -> QuerySet[Task]:
    """Every task in the user's projects: the only way views reach tasks."""
    return Task.objects.filter(project__memberships__user=user).select_related(
        "project", "queue", "owner"
    )


def task_get_for_user(user: AbstractBaseUser, pk: int | str) -> Task:
    """One task of the user's projects, or a 404 (never a 403: others' tasks do not exist)."""
    try:
        return task_list_for_user(user).get(pk=checked_id(pk))
    except (Task.DoesNotExist, ValueError, TypeError):
        raise Http404("no such task") from None


# Ids the database can hold (a bigint): a larger number in a URL is a 404, not a 500.
_MAX_ID = 2**63 - 1


def checked_id(pk: int | str) -> int:
    value = int(pk)
    if not 0 < value <= _MAX_ID:
        raise ValueError(pk)
    return value


def tasks_visible_by_ids(user: AbstractBaseUser, ids: Iterable[int], *, field: str) -> list[Task]:
    """The tasks with these ids, all of which the user must be able to see.

    An id the user cannot see is refused like one that does not exist (400 naming the field).
    """
    ids = list(ids)
    if not ids:
        return []
    found = {t.pk: t for t in task_list_for_user(user).filter(pk__in=ids)}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ApplicationError(
            f"no task #{missing[0]} among your projects' tasks", field=field, got=missing[0]
        )
    return [found[i] for i in ids]


def workflow_list_for_user(user: AbstractBaseUser) -> QuerySet[Workflow]:
    return Workflow.objects.filter(project__memberships__user=user).select_related(
        "project", "owner"
    )


def workflow_get_for_user(user: AbstractBaseUser, pk: int | str) -> Workflow:
    try:
        return workflow_list_for_user(user).get(pk=checked_id(pk))
    except (Workflow.DoesNotExist, ValueError, TypeError):
        raise Http404("no such workflow") from None
