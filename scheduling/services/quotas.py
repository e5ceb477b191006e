"""Writes on quotas: the project page, the API and `manage.py quota`.

Who may: a platform admin sets any quota; a project lead shares out the project's quota
among its members (a member's own quota, never above what an admin granted the project);
`manage.py` (no `by`) is the operator's own hand. Every change is in the audit log, and the
quota rows are versioned like the rest of the configuration (docs/console.md).
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from portal import audit, roles
from portal.errors import ApplicationError
from portal.models import Membership, Project
from scheduling.models import Queue, Quota
from scheduling.models.quotas import lending_problem
from scheduling.selectors import site_view_invalidate

# A lending limit left as the quota has it (None means "lends all").
UNCHANGED: Any = object()


def _check_grant(
    by: User | None,
    project: Project,
    queue: Queue,
    resource: str,
    member,
    limit,
    period,
) -> None:
    """Refuse what `by` may not set: a 403 with the reason (they can see the project)."""
    if by is None or roles.is_platform_admin(by):
        return
    if not roles.leads_project(by, project):
        raise ApplicationError(
            "only the project's lead or a platform admin sets quotas", status=403
        )
    if member is None:
        raise ApplicationError(
            "a project's own quota is granted by a platform admin; as its lead you set "
            "members' quotas within it",
            field="user",
            status=403,
        )
    grant = Quota.objects.filter(project=project, queue=queue, user=None, resource=resource).first()
    if grant is None:
        raise ApplicationError(
            f"the project has no {resource} quota in {queue.name} to share out",
            field="resource",
            got=resource,
        )
    if limit is not None and limit > grant.limit:
        raise ApplicationError(
            f"at most the project's own {grant.limit}", field="limit", got=limit, status=400
        )
    if period is not None and resource in ("gpu_hours", "core_hours") and period != grant.period:
        raise ApplicationError(
            f"the project's budget is per {grant.period}", field="period", got=period
        )


def _lookup(project: str, queue: str, user: str | None) -> tuple[Project, Queue, User | None]:
    the_project = Project.objects.filter(slug=project).first()
    if the_project is None:
        raise ApplicationError("no such project", field="project", got=project)
    the_queue = Queue.objects.filter(name=queue).first()
    if the_queue is None:
        raise ApplicationError("no such queue", field="queue", got=queue)
    the_user = None
    if user:
        the_user = User.objects.filter(username=user).first()
        if (
            the_user is None
            or not Membership.objects.filter(user=the_user, project=the_project).exists()
        ):
            raise ApplicationError("no such member of the project", field="user", got=user)
    return the_project, the_queue, the_user


@transaction.atomic
def quota_set(
    *,
    project: str,
    queue: str,
    resource: str,
    limit: object,
    over_quota: str = "queue",
    user: str | None = None,
    period: str = "month",
    borrowing_limit: object = UNCHANGED,
    lending_limit: object = UNCHANGED,
    by: User | None = None,
    reason: str = "",
) -> Quota:
    """Create or change a quota; waiting tasks see it at the next policy pass. `period`
    is a budget's (gpu_hours, core_hours): day, week or month. `borrowing_limit` and
    `lending_limit` (a whole project's GPUs, CPUs or tasks): how far over `limit` it may go
    on other projects' unused quota in the queue, and how much of its own it lends (None:
    all it does not use); set by a platform admin. Left `UNCHANGED`, a quota keeps its own
    (a new one: 0 and None)."""
    if resource not in Quota.Resource.values:
        raise ApplicationError(
            f"must be one of {', '.join(Quota.Resource.values)}", field="resource", got=resource
        )
    if over_quota not in Quota.OverQuota.values:
        raise ApplicationError("must be queue or reject", field="over_quota", got=over_quota)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ApplicationError("must be a whole number, 0 or more", field="limit", got=limit)
    if period not in Quota.Period.values:
        raise ApplicationError("must be day, week or month", field="period", got=period)
    existing = _existing(project, queue, resource, user)
    if borrowing_limit is UNCHANGED:
        borrowing_limit = existing.borrowing_limit if existing else 0
    if lending_limit is UNCHANGED:
        lending_limit = existing.lending_limit if existing else None
    if not _whole(borrowing_limit):
        raise ApplicationError(
            "must be a whole number, 0 or more", field="borrowing_limit", got=borrowing_limit
        )
    if lending_limit is not None and not _whole(lending_limit):
        raise ApplicationError(
            "must be a whole number, 0 or more, or empty for all of it",
            field="lending_limit",
            got=lending_limit,
        )
    assert isinstance(borrowing_limit, int)  # for the type checker: _whole said so
    lends = lending_limit if isinstance(lending_limit, int) else None
    problem = lending_problem(resource, bool(user), borrowing_limit, lends)
    if problem is not None:
        got = borrowing_limit if problem[0] == "borrowing_limit" else lending_limit
        raise ApplicationError(problem[1], field=problem[0], got=got)
    the_project, the_queue, the_user = _lookup(project, queue, user)
    _check_grant(by, the_project, the_queue, resource, the_user, limit, period)
    with audit.because(reason):
        quota, _ = Quota.objects.update_or_create(
            project=the_project,
            queue=the_queue,
            user=the_user,
            resource=resource,
            defaults={
                "limit": limit,
                "over_quota": over_quota,
                "period": period,
                "borrowing_limit": borrowing_limit,
                "lending_limit": lends,
            },
        )
    audit.record(
        audit.Action.QUOTA_SET,
        actor=by if by is not None else audit.ACTOR_FROM_REQUEST,
        target=str(quota),
        project=the_project.slug,
        queue=the_queue.name,
        detail={
            "resource": resource,
            "limit": limit,
            "borrowing_limit": borrowing_limit,
            "lending_limit": lends,
            "user": user or None,
            "reason": reason,
        },
    )
    transaction.on_commit(site_view_invalidate)
    return quota


def _existing(project: str, queue: str, resource: str, user: str | None) -> Quota | None:
    found = Quota.objects.filter(project__slug=project, queue__name=queue, resource=resource)
    if user:
        return found.filter(user__username=user).first()
    return found.filter(user__isnull=True).first()


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@transaction.atomic
def quota_delete(
    *,
    project: str,
    queue: str,
    resource: str,
    user: str | None = None,
    by: User | None = None,
    reason: str = "",
) -> int:
    the_project, the_queue, the_user = _lookup(project, queue, user)
    _check_grant(by, the_project, the_queue, resource, the_user, None, None)
    found = Quota.objects.filter(project=the_project, queue=the_queue, resource=resource)
    found = found.filter(user=the_user) if the_user else found.filter(user__isnull=True)
    with audit.because(reason):
        deleted, _ = found.delete()
    if deleted:
        audit.record(
            audit.Action.QUOTA_DELETE,
            actor=by if by is not None else audit.ACTOR_FROM_REQUEST,
            target=f"{resource} quota of {user or project} in {queue}",
            project=the_project.slug,
            queue=the_queue.name,
            detail={"resource": resource, "user": user or None, "reason": reason},
        )
    transaction.on_commit(site_view_invalidate)
    return deleted
