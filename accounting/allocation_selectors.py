"""Reads of allocations: what a project was granted, used to date and has left, why its new
work waits, and the requests for more a user may see or decide (docs/accounting.md).

Who sees what: members (and leads) their projects' allocations and requests; finance and
platform admins every project's. Only platform admins decide requests. What a user may not
see does not exist for them (404)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from accounting import allocations as pure
from accounting.budget import day_start, hours_since, period_start
from accounting.models import Allocation, AllocationRequest
from portal import roles
from portal.models import Project

_METRIC = {"gpu_hours": "gpu", "core_hours": "cpu"}
SHOWN = 6  # allocations on the project page


def view_of(allocation: Allocation) -> pure.AllocationView:
    return pure.AllocationView(
        name=allocation.name,
        starts=allocation.starts,
        ends=allocation.ends,
        gpu_hours=allocation.gpu_hours,
        core_hours=allocation.core_hours,
    )


def used_of(
    allocation: Allocation, project: str, now: datetime, resources: tuple[str, ...] | None = None
) -> dict[str, float]:
    """Hours the project used of each resource the allocation limits, from its first day
    (the site's time zone) to its last or now."""
    start = day_start(allocation.starts)
    used = {}
    for resource, _ in pure.RESOURCES:
        if getattr(allocation, resource) is None or (resources and resource not in resources):
            continue
        used[resource] = hours_since(
            project, _METRIC[resource], start, now, last_day=allocation.ends
        )
    return used


def today(now: datetime):
    return period_start("day", now).date()


def allocated_projects() -> frozenset[str]:
    """The projects that have an allocation, current or not: only their work is asked about
    (read with the site's policy, scheduling.selectors.site)."""
    return frozenset(Allocation.objects.values_list("project__slug", flat=True).distinct())


def allocation_hold(project: str, gpus: int, cpus: int, now: datetime) -> str | None:
    """Why a task of `project` asking `gpus` and `cpus` waits for an allocation, or None.
    Registered as the scheduling app's allocation reader (accounting/apps.py)."""
    found = list(Allocation.objects.filter(project__slug=project))
    if not found:
        return None
    day = today(now)
    views = [view_of(a) for a in found]
    reason = pure.outside_reason(views, day)
    if reason is not None:
        return reason
    chosen = pure.current(views, day)
    assert chosen is not None  # outside_reason said one covers today
    allocation = found[views.index(chosen)]
    wants = pure.needs(gpus, cpus)
    if not any(chosen.granted(r) is not None for r in wants):
        return None
    return pure.spent_reason(chosen, used_of(allocation, project, now, wants), wants)


def allocation_report(allocation: Allocation, now: datetime | None = None) -> dict[str, Any]:
    """An allocation with its dates, state and each resource's granted, used and remaining."""
    now = now or timezone.now()
    day = today(now)
    state = "current" if allocation.starts <= day <= allocation.ends else "expired"
    if allocation.starts > day:
        state = "upcoming"
    used = used_of(allocation, allocation.project.slug, now) if state != "upcoming" else {}
    return {
        "id": allocation.pk,
        "project": allocation.project.slug,
        "name": allocation.name,
        "starts": allocation.starts,
        "ends": allocation.ends,
        "state": state,
        "resources": [
            {
                "resource": line.resource,
                "unit": line.unit,
                "granted": line.granted,
                "used": line.used,
                "remaining": line.remaining,
            }
            for line in pure.lines(view_of(allocation), used)
        ],
    }


def project_allocations(project: Project, user: User | None = None) -> dict[str, Any]:
    """The project page's section: every allocation (newest first) with its numbers, why
    new work waits (if it does), and the pending request for more."""
    now = timezone.now()
    found = list(Allocation.objects.filter(project=project).select_related("project"))
    views = [view_of(a) for a in found]
    pending = AllocationRequest.objects.filter(project=project, state="pending").first()
    recent = list(
        AllocationRequest.objects.filter(project=project)
        .exclude(state="pending")
        .select_related("decided_by")[:5]
    )
    return {
        # The newest few: a project of many years does not list its whole history here
        # (the API pages through all of them).
        "allocations": [allocation_report(a, now) for a in found[:SHOWN]],
        "waits": pure.outside_reason(views, today(now)),
        "pending": pending,
        "decided": recent,
        "may_request": user is not None and roles.leads_project(user, project),
    }


def standing_text(project: Project, now: datetime | None = None) -> str:
    """One line on where the project stands, for the admin deciding its request:
    `'materials 2026' until 2027-01-04: 12.0 of 100 GPU-hours used; …`."""
    now = now or timezone.now()
    found = list(Allocation.objects.filter(project=project).select_related("project"))
    views = [view_of(a) for a in found]
    waits = pure.outside_reason(views, today(now))
    if not found or waits is not None:
        return waits or "no allocation yet"
    chosen = pure.current(views, today(now))
    allocation = found[views.index(chosen)] if chosen is not None else found[0]
    used = used_of(allocation, project.slug, now)
    parts = [
        f"{line.used:.1f} of {line.granted} {line.unit} used"
        for line in pure.lines(view_of(allocation), used)
    ]
    return f"'{allocation.name}' until {allocation.ends:%Y-%m-%d}: " + (
        "; ".join(parts) or "no budget limit"
    )


def _projects_of(user: User) -> Q:
    return Q(project__memberships__user=user)


def allocations_visible_to(user: User) -> QuerySet[Allocation]:
    found = Allocation.objects.select_related("project").order_by("project__slug", "-starts")
    if roles.sees_all_usage(user):
        return found
    return found.filter(_projects_of(user)).distinct()


def allocation_get_for_user(user: User, pk: int) -> Allocation:
    found = allocations_visible_to(user).filter(pk=pk).first()
    if found is None:
        raise Http404("no such allocation")
    return found


def requests_visible_to(user: User) -> QuerySet[AllocationRequest]:
    found = AllocationRequest.objects.select_related(
        "project", "requester", "decided_by", "allocation"
    ).order_by("-id")
    if roles.sees_all_usage(user):
        return found
    return found.filter(_projects_of(user)).distinct()


def request_get_for_user(user: User, pk: int) -> AllocationRequest:
    found = requests_visible_to(user).filter(pk=pk).first()
    if found is None:
        raise Http404("no such allocation request")
    return found


def inbox_for(user: User) -> QuerySet[AllocationRequest]:
    """The pending requests a platform admin decides, the oldest first (none for others)."""
    if not roles.is_platform_admin(user):
        return AllocationRequest.objects.none()
    return requests_visible_to(user).filter(state="pending").order_by("id")
