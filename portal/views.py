"""Console pages of the portal itself: the configuration history, the audit log, and the
projects with their members (a project's quotas are set on its page through scheduling's
quota view; its page warns when a folder of it passes its storage area's soft quota)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from portal.parsing import checked_pk
from portal.selectors import (
    audit_actions,
    audit_filter,
    audit_visible_to,
    config_model_choices,
    config_version_get_visible,
    config_version_place,
    config_versions_visible,
    project_allocations,
    project_get_visible,
    project_list_visible,
    project_memberships,
    project_storage_warnings,
)
from portal.services import (
    config_version_restore,
    config_version_undo,
    member_add,
    member_remove,
)
from scheduling import usage


@login_required
def config_history(request: SignedInRequest) -> HttpResponse:
    versions = config_versions_visible(request.user)
    if versions is None:
        raise Http404("no such page")
    versions = versions.select_related("restores")
    model = request.GET.get("model") or ""
    if model:
        versions = versions.filter(model=model)
    page = Paginator(versions, 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "model": model,
        "models": config_model_choices(),
        "can_roll_back": roles.is_platform_admin(request.user),
    }
    return render(request, "portal/config_history.html", context)


def _version(request: SignedInRequest, pk: int | str):
    try:
        found = config_version_get_visible(request.user, checked_pk(pk))
    except ValueError:
        found = None
    if found is None:
        raise Http404("no such version")
    return found


@login_required
def config_version(request: SignedInRequest, pk: int) -> HttpResponse:
    version = _version(request, pk)
    place = config_version_place(version)
    context = {
        "version": version,
        "previous": place.previous,
        "changes": place.changes,
        "to_restore": place.to_restore,
        "later": place.later,
        "can_roll_back": roles.is_platform_admin(request.user) and place.later > 0,
        "to_undo": place.to_undo,
        "undo_refusal": place.undo_refusal,
        "can_undo": roles.is_platform_admin(request.user),
    }
    return render(request, "portal/config_version.html", context)


@login_required
@require_POST
def config_rollback(request: SignedInRequest, pk: int) -> HttpResponse:
    version = _version(request, pk)
    try:
        made = config_version_restore(
            user=request.user, version=version, reason=request.POST.get("reason", "")
        )
    except ApplicationError as exc:
        if exc.status == 403:
            raise Http404("no such page") from None
        messages.error(request, f"{exc.errors[0].field or 'rollback'}: {exc}")
        return redirect("config-version", pk=version.pk)
    messages.success(request, f"Rolled back to v{version.pk}: recorded as v{made.pk}.")
    return redirect("config-version", pk=made.pk)


@login_required
@require_POST
def config_undo(request: SignedInRequest, pk: int) -> HttpResponse:
    """Undo one change (the version page shows what it will do and asks why first)."""
    version = _version(request, pk)
    try:
        made = config_version_undo(
            user=request.user, version=version, reason=request.POST.get("reason", "")
        )
    except ApplicationError as exc:
        if exc.status == 403:
            raise Http404("no such page") from None
        messages.error(request, f"{exc.errors[0].field or 'undo'}: {exc}")
        return redirect(f"{reverse('config-version', args=[version.pk])}#undo")
    messages.success(request, f"Undid v{version.pk}: recorded as v{made.pk}.")
    return redirect("config-version", pk=made.pk)


@login_required
def audit_log(request: SignedInRequest) -> HttpResponse:
    error = None
    rows = audit_visible_to(request.user)
    try:
        rows = audit_filter(rows, request.GET)
    except ApplicationError as exc:
        error = exc.errors[0]
    page = Paginator(rows, 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "error": error,
        "actions": audit_actions(),
        "params": {k: request.GET.get(k, "") for k in ("action", "actor", "project", "since")},
        "sees_all": roles.is_platform_admin(request.user),
    }
    template = "portal/_audit_rows.html" if request.htmx else "portal/audit.html"
    return render(request, template, context)


def _project(request: SignedInRequest, slug: str):
    found = project_get_visible(request.user, slug)
    if found is None:
        raise Http404("no such project")
    return found


@login_required
def home(request: SignedInRequest) -> HttpResponse:
    """Where a login lands: the page each role starts its day on (portal.roles.home)."""
    return redirect(roles.home(request.user))


@login_required
def project_list(request: SignedInRequest) -> HttpResponse:
    projects = project_list_visible(request.user)
    return render(request, "portal/project_list.html", {"projects": projects})


@login_required
def project_detail(request: SignedInRequest, slug: str) -> HttpResponse:
    project = _project(request, slug)
    context = {
        "project": project,
        "members": project_memberships(project, order=("role", "user__username")),
        "quotas": usage.project_quotas(project),
        "storage_warnings": project_storage_warnings(project),
        "allocation": project_allocations(project, request.user),
        "leads": roles.leads_project(request.user, project),
        "queues": usage.queue_names(),
        "resources": usage.quota_resources(),
    }
    return render(request, "portal/project_detail.html", context)


@login_required
@require_POST
def project_members(request: SignedInRequest, slug: str) -> HttpResponse:
    """Add (`username`) or remove (`remove`) a member."""
    project = _project(request, slug)
    try:
        if request.POST.get("remove"):
            member_remove(by=request.user, project=project, username=request.POST["remove"])
            messages.success(request, f"{request.POST['remove']} is no longer a member.")
        else:
            username = request.POST.get("username", "").strip()
            member_add(by=request.user, project=project, username=username)
            messages.success(request, f"{username} is now a member of {project.slug}.")
    except ApplicationError as exc:
        if exc.status == 403:
            raise PermissionDenied(str(exc)) from None
        messages.error(request, f"{exc.errors[0].field or 'member'}: {exc}")
    return redirect("project-detail", slug=project.slug)
