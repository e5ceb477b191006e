"""Pages of live sandboxes (docs/sandboxes.md): the live sandboxes of the user's projects
(state, idle time, instance-minutes), and one sandbox's terminal-like exec history."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling.descriptor import slug_problem
from scheduling.selectors.sandboxes import (
    sandbox_execs,
    sandbox_get_for_user,
    sandbox_list_for_user,
)
from scheduling.services.sandboxes import sandbox_delete, sandbox_refresh, sandbox_summary

LIMIT = 200


@login_required
def sandbox_list(request: SignedInRequest) -> HttpResponse:
    rows = sandbox_list_for_user(request.user).filter(state__in=["starting", "ready", "queued"])
    asked = request.GET.get("project")
    project = asked if asked is not None and slug_problem(asked) is None else None
    if project is not None:
        rows = rows.filter(project__slug=project)
    recent = sandbox_list_for_user(request.user).exclude(state__in=["starting", "ready", "queued"])
    if project is not None:
        recent = recent.filter(project__slug=project)
    context = {
        "project": project,
        "live": [sandbox_summary(s) for s in rows[:LIMIT]],
        "recent": [sandbox_summary(s) for s in recent[:20]],
    }
    return render(request, "scheduling/sandbox_list.html", context)


@login_required
def sandbox_detail(request: SignedInRequest, sid: str) -> HttpResponse:
    sandbox = sandbox_refresh(sandbox_get_for_user(request.user, sid))
    context = {
        "sandbox": sandbox,
        "summary": sandbox_summary(sandbox),
        "execs": sandbox_execs(sandbox, limit=LIMIT),
    }
    return render(request, "scheduling/sandbox_detail.html", context)


@login_required
@require_POST
def sandbox_end(request: SignedInRequest, sid: str) -> HttpResponse:
    sandbox = sandbox_get_for_user(request.user, sid, activity=False)
    try:
        sandbox_delete(user=request.user, sandbox=sandbox)
    except ApplicationError as exc:
        messages.error(request, str(exc))
    return redirect("sandbox-detail", sid=sandbox.public_id)
