"""Allocation pages: a lead's request for more (from the project page) and the platform
admins' inbox where requests are decided (docs/accounting.md)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounting import allocation_selectors as selectors
from accounting import allocation_services as services
from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest


@login_required
@require_POST
def allocation_request(request: SignedInRequest, slug: str) -> HttpResponse:
    try:
        made = services.allocation_request_create(
            user=request.user,
            project=slug,
            gpu_hours=request.POST.get("gpu_hours", ""),
            core_hours=request.POST.get("core_hours", ""),
            ends=request.POST.get("ends", ""),
            justification=request.POST.get("justification", ""),
        )
    except ApplicationError as exc:
        error = exc.errors[0]
        if exc.status == 403:
            raise PermissionDenied(str(exc)) from None
        if exc.status == 400 and error.field == "project":  # not theirs: it does not exist
            raise Http404("no such project") from None
        messages.error(request, f"Not sent — {error.field or 'request'}: {error.message}")
    else:
        messages.success(request, f"Request #{made.pk} sent: a platform admin decides.")
    return redirect("project-detail", slug=slug)


@login_required
def allocation_requests(request: SignedInRequest) -> HttpResponse:
    """The inbox (platform admins decide, the oldest first) and the recent requests."""
    # Each request with where its project stands now, to decide on.
    inbox = [
        (r, selectors.standing_text(r.project)) for r in selectors.inbox_for(request.user)[:100]
    ]
    context = {
        "decider": roles.is_platform_admin(request.user),
        "inbox": inbox,
        "recent": list(selectors.requests_visible_to(request.user).exclude(state="pending")[:50]),
    }
    return render(request, "accounting/allocation_requests.html", context)


@login_required
@require_POST
def allocation_request_decide(request: SignedInRequest, pk: int, verdict: str) -> HttpResponse:
    if verdict not in ("approve", "reject"):
        raise Http404("no such decision")
    found = selectors.request_get_for_user(request.user, pk)
    try:
        services.allocation_request_decide(
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
    return redirect("allocation-requests")
