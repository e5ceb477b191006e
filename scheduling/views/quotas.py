"""A project's quotas, set on its page: a member's within the project's, by its lead."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError
from portal.http import SignedInRequest
from portal.selectors import project_get_visible
from scheduling.services.quotas import quota_delete, quota_set


@login_required
@require_POST
def project_quota(request: SignedInRequest, slug: str) -> HttpResponse:
    """Set (or, with `delete`, remove) a quota: a member's within the project's, by its lead."""
    project = project_get_visible(request.user, slug)
    if project is None:
        raise Http404("no such project")
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
