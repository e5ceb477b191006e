"""Who sees and who decides priority-raise requests.

A researcher sees the requests of their projects; a queue admin also sees every request for
their queues and decides them; a platform admin sees and decides all. Anything else is a 404.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.http import Http404

from portal.parsing import checked_pk
from scheduling.models import PriorityRequest


def requests_visible_to(user: User) -> QuerySet[PriorityRequest]:
    found = PriorityRequest.objects.select_related(
        "requester", "project", "queue", "task", "task__queue", "decided_by"
    )
    if user.is_superuser:
        return found
    return found.filter(Q(project__memberships__user=user) | Q(queue__admins=user)).distinct()


def inbox_for(user: User) -> QuerySet[PriorityRequest]:
    """The pending requests this user may decide, oldest first."""
    pending = requests_visible_to(user).filter(state=PriorityRequest.State.PENDING)
    if not user.is_superuser:
        pending = pending.filter(queue__admins=user)
    return pending.order_by("id")


def can_decide(user: User, request: PriorityRequest) -> bool:
    return user.is_superuser or request.queue.admins.filter(pk=user.pk).exists()


def is_decider(user: User) -> bool:
    """Whether the user has an inbox at all (platform admin, or admin of some queue)."""
    return user.is_superuser or user.administered_queues.exists()


def request_get_for_user(user: User, pk: int | str) -> PriorityRequest:
    try:
        return requests_visible_to(user).get(pk=checked_pk(pk))
    except (PriorityRequest.DoesNotExist, ValueError, TypeError):
        raise Http404("no such priority request") from None
