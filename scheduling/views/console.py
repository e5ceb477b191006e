"""Console pages for the people who run things: a queue admin's queue, a project lead's project."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from portal.models import Project, Quota
from scheduling.models import Queue
from scheduling.selectors.quota import project_quotas
from scheduling.services.queues import QueueForm, queue_update
from scheduling.services.quotas import member_add, member_remove, quota_delete, quota_set


def _queue(request: SignedInRequest, name: str) -> Queue:
    queue = Queue.objects.select_related("pool").filter(name=name).first()
    if queue is None or not roles.administers_queue(request.user, queue.pk):
        raise Http404("no such queue")
    return queue


@login_required
def queue_edit(request: SignedInRequest, name: str) -> HttpResponse:
    queue = _queue(request, name)
    form = QueueForm(instance=queue)
    reason = ""
    if request.method == "POST":
        reason = request.POST.get("reason", "")
        form = QueueForm(request.POST, instance=queue)
        try:
            queue_update(user=request.user, queue=queue, data=request.POST, reason=reason)
        except ApplicationError as exc:
            for item in exc.errors:
                if item.field in form.fields:
                    form.add_error(item.field, item.message)
                else:
                    messages.error(request, f"{item.field or 'queue'}: {item.message}")
        else:
            messages.success(
                request, f"Queue {queue.name} changed; the engine sees it within seconds."
            )
            return redirect("queue-list")
    context = {"queue": queue, "form": form, "reason": reason}
    return render(request, "scheduling/queue_edit.html", context)


def _project(request: SignedInRequest, slug: str) -> Project:
    found = Project.objects.filter(slug=slug).first()
    if found is None or not (
        roles.is_platform_admin(request.user)
        or found.memberships.filter(user=request.user).exists()
    ):
        raise Http404("no such project")
    return found


@login_required
def project_list(request: SignedInRequest) -> HttpResponse:
    projects = Project.objects.order_by("slug").select_related("pi")
    if not roles.is_platform_admin(request.user):
        projects = projects.filter(memberships__user=request.user)
    return render(request, "scheduling/project_list.html", {"projects": projects})


@login_required
def project_detail(request: SignedInRequest, slug: str) -> HttpResponse:
    project = _project(request, slug)
    members = project.memberships.select_related("user").order_by("role", "user__username")
    context = {
        "project": project,
        "members": members,
        "quotas": project_quotas(project),
        "leads": roles.leads_project(request.user, project),
        "queues": Queue.objects.order_by("name").values_list("name", flat=True),
        "resources": Quota.Resource.choices,
    }
    return render(request, "scheduling/project_detail.html", context)


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


@login_required
@require_POST
def project_quota(request: SignedInRequest, slug: str) -> HttpResponse:
    """Set (or, with `delete`, remove) a quota: a member's within the project's, by its lead."""
    project = _project(request, slug)
    post = request.POST
    fields: dict[str, Any] = dict(
        project=project.slug,
        queue=post.get("queue", ""),
        resource=post.get("resource", ""),
        user=post.get("user", "").strip() or None,
        by=request.user,
        reason=post.get("reason", ""),
    )
    try:
        if post.get("delete"):
            quota_delete(**fields)
            messages.success(request, "Quota removed.")
        else:
            try:
                limit = int(post.get("limit", ""))
            except ValueError:
                raise ApplicationError(
                    "a whole number", field="limit", got=post.get("limit")
                ) from None
            quota = quota_set(
                **fields,
                limit=limit,
                over_quota=post.get("over_quota") or "queue",
                period=post.get("period") or "month",
            )
            messages.success(request, f"Quota set: {quota}.")
    except ApplicationError as exc:
        if exc.status == 403:  # a member sees the project but does not set its quotas
            raise PermissionDenied(str(exc)) from None
        messages.error(request, f"{exc.errors[0].field or 'quota'}: {exc}")
    return redirect("project-detail", slug=project.slug)
