"""Browser pages. Thin: a selector or one service per view, then a template or a fragment."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError
from portal.selectors import project_list_for_user
from scheduling import services
from scheduling.forms import FIELD_FOR_ERROR, TaskSubmitForm
from scheduling.models import TaskState
from scheduling.selectors import task_get_for_user, task_list_for_user

LIVE_STATES = {"pending", "waiting", "queued", "running"}


@login_required
def task_list(request: HttpRequest) -> HttpResponse:
    tasks = task_list_for_user(request.user).order_by("-id")
    state = request.GET.get("state")
    if state:
        tasks = tasks.filter(state=state)
    page = Paginator(tasks, 50).get_page(request.GET.get("page"))
    template = "scheduling/task_rows.html" if request.htmx else "scheduling/task_list.html"
    return render(
        request, template, {"page": page, "state": state or "", "states": TaskState.choices}
    )


@login_required
def task_detail(request: HttpRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk)
    context = {
        "task": task,
        "events": task.events.all(),
        "attempts": task.attempt_set.all(),
        "log": services.task_log(task=task, limit=256 * 1024) if task.backend_id else "",
        "live": task.state in LIVE_STATES,
    }
    template = "scheduling/task_status.html" if request.htmx else "scheduling/task_detail.html"
    return render(request, template, context)


@login_required
@require_POST
def task_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk)
    try:
        services.task_cancel(user=request.user, task=task)
    except ApplicationError as exc:
        from django.contrib import messages

        messages.error(request, str(exc))
    return redirect("task-detail", pk=task.pk)


@login_required
def task_submit(request: HttpRequest) -> HttpResponse:
    projects = list(project_list_for_user(request.user).values_list("slug", flat=True))
    form = TaskSubmitForm(request.POST or None, request.FILES or None, projects=projects)
    errors: list = []
    if request.method == "POST" and form.is_valid():
        source = form.descriptor_source()
        try:
            if source is not None:
                task = services.task_submit(user=request.user, text=source[0], fmt=source[1])
            else:
                doc = form.as_descriptor()
                if form.errors:
                    raise ApplicationError("fix the fields marked", field=None)
                task = services.task_submit(user=request.user, text=json.dumps(doc), fmt="json")
        except ApplicationError as exc:
            errors = _attach(form, exc, by_field=source is None)
        else:
            return redirect("task-detail", pk=task.pk)
    return render(
        request,
        "scheduling/task_submit.html",
        {"form": form, "errors": errors},
        status=400 if errors else 200,
    )


def _attach(form: TaskSubmitForm, exc: ApplicationError, *, by_field: bool) -> list:
    """Put each error beside its form field; the rest are listed above the form."""
    rest = []
    for err in exc.errors:
        target = FIELD_FOR_ERROR.get(err.field or "") if by_field else None
        if target:
            form.add_error(target, err.message)
        else:
            rest.append(err)
    return rest
