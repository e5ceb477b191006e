"""Writes on quotas, for `manage.py quota` (the admin console and API read the same rows)."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from portal.errors import ApplicationError
from portal.models import Membership, Project, Quota
from scheduling.models import Queue
from scheduling.selectors import site_view_invalidate


@transaction.atomic
def quota_set(
    *,
    project: str,
    queue: str,
    resource: str,
    limit: int,
    over_quota: str = "queue",
    user: str | None = None,
    period: str = "month",
) -> Quota:
    """Create or change a quota; waiting tasks see it at the next policy pass. `period`
    is a budget's (gpu_hours, core_hours): day, week or month."""
    if resource not in Quota.Resource.values:
        raise ApplicationError(
            f"must be one of {', '.join(Quota.Resource.values)}", field="resource", got=resource
        )
    if over_quota not in Quota.OverQuota.values:
        raise ApplicationError("must be queue or reject", field="over_quota", got=over_quota)
    if limit < 0:
        raise ApplicationError("must be 0 or more", field="limit", got=limit)
    if period not in Quota.Period.values:
        raise ApplicationError("must be day, week or month", field="period", got=period)
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
    quota, _ = Quota.objects.update_or_create(
        project=the_project,
        queue=the_queue,
        user=the_user,
        resource=resource,
        defaults={"limit": limit, "over_quota": over_quota, "period": period},
    )
    transaction.on_commit(site_view_invalidate)
    return quota


@transaction.atomic
def quota_delete(*, project: str, queue: str, resource: str, user: str | None = None) -> int:
    found = Quota.objects.filter(project__slug=project, queue__name=queue, resource=resource)
    found = found.filter(user__username=user) if user else found.filter(user__isnull=True)
    deleted, _ = found.delete()
    transaction.on_commit(site_view_invalidate)
    return deleted
