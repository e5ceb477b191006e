"""Policy pages: ask for a higher level, the admins' inbox, the queues and their rules."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from portal.parsing import parse_until
from portal.selectors import project_list_for_user
from scheduling import services
from scheduling.decisions.humanize import format_duration
from scheduling.decisions.levels import LEVELS, rule_for
from scheduling.decisions.order import format_window
from scheduling.presenters.runtimes import queue_prediction_text
from scheduling.presenters.task_list import unstarted
from scheduling.selectors import site_view, task_get_for_user
from scheduling.selectors.capacity import lenders_by_pool
from scheduling.selectors.policy import site_minute
from scheduling.selectors.queues import queue_list as queues_with_admins
from scheduling.selectors.quota import project_quotas
from scheduling.selectors.requests import (
    inbox_for,
    is_decider,
    request_get_for_user,
    requests_visible_to,
)
from scheduling.selectors.runtimes import queue_prediction_errors
from scheduling.selectors.waiting import positions
from scheduling.spec import TASK_TYPES


@login_required
@require_POST
def task_priority_request(request: SignedInRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk, change=True)
    try:
        made = services.priority_request_create(
            user=request.user,
            task=task,
            level=request.POST.get("level", ""),
            reason=request.POST.get("reason", ""),
            until=parse_until(request.POST.get("until", "")),
        )
    except ApplicationError as exc:
        messages.error(request, f"{exc.errors[0].field or 'request'}: {exc}")
    else:
        messages.success(
            request, f"Request #{made.pk} sent: a queue admin of {task.queue.name} decides."
        )
    return redirect("task-detail", pk=task.pk)


@login_required
def priority_requests(request: SignedInRequest) -> HttpResponse:
    decider = is_decider(request.user)
    # A sweep can fill an inbox: it is paged (`?page=`), the oldest first; the recent list is
    # the newest 50 (the API pages through all of them).
    inbox: QuerySet[Any] | list[Any] = inbox_for(request.user) if decider else []
    page = Paginator(inbox, 50).get_page(request.GET.get("page"))
    context = {
        "decider": decider,
        "inbox": _standing(list(page.object_list)),
        "page": page,
        "recent": list(requests_visible_to(request.user).order_by("-id")[:50]),
        "levels": LEVELS,
    }
    return render(request, "scheduling/priority_requests.html", context)


def _standing(requests: list[Any]) -> list[Any]:
    """Each request with where its task stands now: its state, how long it has waited (or
    run), and its place among its queue's waiting tasks, so that a request for a task that
    already runs, or is next anyway, is seen as such."""
    now = timezone.now()
    tasks = [r.task for r in requests if r.task is not None]
    places = positions(tasks, now)
    for r in requests:
        task = r.task
        r.standing = None
        if task is None:
            continue
        since = task.started_at if task.started_at and not task.is_terminal else task.submitted_at
        r.standing = {
            "state": task.state,
            "since": since,
            "running": task.state == "running",
            "place": places.get(task.pk),
            # A raise applies to a task that has not started: past that only a rejection.
            "started": not unstarted(task),
        }
    return requests


@login_required
@require_POST
def priority_request_decide(request: SignedInRequest, pk: int, verdict: str) -> HttpResponse:
    if verdict not in ("approve", "reject"):
        raise Http404("no such decision")
    found = request_get_for_user(request.user, pk)
    try:
        services.priority_request_decide(
            user=request.user,
            request=found,
            approve=verdict == "approve",
            comment=request.POST.get("comment", ""),
        )
    except ApplicationError as exc:
        if exc.status == 403:  # they see the request (their project's) but do not decide it
            raise PermissionDenied(str(exc)) from None
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Request #{found.pk} {found.state}.")
    return redirect("priority-requests")


@login_required
def queue_list(request: SignedInRequest) -> HttpResponse:
    """Every queue with its rules, its weights now, and the quotas of the user's projects."""
    site = site_view()
    now = timezone.now()
    minute = site_minute(now)
    quotas: dict[str, list[dict[str, Any]]] = {}
    for project in project_list_for_user(request.user).order_by("slug"):
        for row in project_quotas(project):
            quotas.setdefault(row["queue"], []).append({"project": project.slug, **row})
    queues = []
    rows = list(queues_with_admins())
    lenders = lenders_by_pool()  # backfill across pools
    errors = queue_prediction_errors([q.pk for q in rows], now=now)
    for queue in rows:
        policy = site.queues[queue.name]
        windows = site.weights.get(queue.name, ())
        types = policy.task_types or TASK_TYPES
        queues.append(
            {
                "queue": queue,
                "types": types,
                "levels": [rule_for(site.level_rules, t, queue.name).describe() for t in types],
                "windows": [(format_window(w), w.covers(minute)) for w in windows],
                "quotas": quotas.get(queue.name, []),
                "admins": [a.get_username() for a in queue.admins.all()],
                "can_edit": roles.administers_queue(request.user, queue.pk),
                "prediction": queue_prediction_text(errors[queue.pk]),
                "lenders": lenders.get(queue.pool.name, []),
                "max_walltime": format_duration(queue.max_walltime_s or 0),
                "idle_end": format_duration(queue.idle_scale_in_s or 0),
                "wait_bound": format_duration(queue.wait_bound_s or 0),
            }
        )
    to_decide = inbox_for(request.user).count() if is_decider(request.user) else 0
    context = {
        "queues": queues,
        "now": now,
        "classifier": site.classifier,
        "to_decide": to_decide,
    }
    return render(request, "scheduling/queue_list.html", context)
