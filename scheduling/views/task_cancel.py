"""Cancelling from the pages, always after a confirmation that says what it ends: one task
(its page's button opens the confirmation; no script needed) or the task list's ticked rows."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError
from portal.http import SignedInRequest
from portal.parsing import checked_pk
from scheduling import services
from scheduling.presenters.task_list import (
    cancel_question,
    current_nodes,
    holds,
    names,
    node_span,
)
from scheduling.selectors import task_get_for_user, tasks_split_for_change

MAX_BULK = 500  # ten pages of the list; more is a workflow's or a script's job (the API)


@login_required
def task_cancel(request: SignedInRequest, pk: int) -> HttpResponse:
    """GET: the confirmation, saying what cancelling ends; POST: cancel."""
    task = task_get_for_user(request.user, pk, change=True)
    if request.method != "POST":
        nodes = current_nodes([task.pk]).get(task.pk, [])
        context = {"task": task, "question": cancel_question(task, nodes)}
        return render(request, "scheduling/task_cancel_confirm.html", context)
    try:
        services.task_cancel(user=request.user, task=task)
    except ApplicationError as exc:
        messages.error(request, str(exc))
    else:
        done = "is being cancelled" if task.cancelling else "is cancelled"
        messages.success(request, f"Task {task.name} {done}.")
    return redirect("task-detail", pk=task.pk)


@login_required
@require_POST
def task_bulk_cancel(request: SignedInRequest) -> HttpResponse:
    """The ticked rows (`task`, repeated): without `confirm`, the page that lists what would
    be cancelled; with it, cancel those the user may change and report the others."""
    try:
        ids = _ids(request.POST.getlist("task"))
    except ApplicationError as exc:
        messages.error(request, str(exc))
        return redirect(_back(request))
    mine, others = tasks_split_for_change(request.user, ids)
    if request.POST.get("confirm") != "yes":
        nodes = current_nodes(t.pk for t in mine)
        context = {
            "rows": [
                (t, holds(t, nodes.get(t.pk, [])), node_span(nodes.get(t.pk, []))) for t in mine
            ],
            "others": others,
            "back": _back(request),
        }
        return render(request, "scheduling/task_bulk_cancel.html", context)
    report = services.task_cancel_many(user=request.user, tasks=mine, others=others)
    ended = [t for t in report.cancelled if not t.cancelling]
    ending = [t for t in report.cancelled if t.cancelling]
    if ended:
        messages.success(request, f"Cancelled {len(ended)}: {names(ended)}.")
    if ending:  # a worker ends their jobs; the list shows them "cancelling" until then
        messages.success(request, f"Being cancelled {len(ending)}: {names(ending)}.")
    for task, why in report.refused:
        messages.error(request, f"Not cancelled: {task.name} (#{task.pk}): {why}.")
    return redirect(_back(request))


def _ids(values: list[str]) -> list[int]:
    if not values:
        raise ApplicationError("tick the tasks to cancel first", field="task")
    if len(values) > MAX_BULK:
        raise ApplicationError(f"at most {MAX_BULK} tasks at once", field="task", got=len(values))
    ids = []
    for value in values:
        try:
            if not value.isascii():  # int() reads other scripts' digits; ids are ASCII
                raise ValueError(value)
            ids.append(checked_pk(value))
        except (ValueError, TypeError):
            raise ApplicationError(
                "task ids are whole numbers above 0", field="task", got=value[:40]
            ) from None
    return ids


def _back(request: SignedInRequest) -> str:
    """Back to the list as it was filtered (`back`, a query string the list gave)."""
    query, page = request.POST.get("back", ""), reverse("task-list")
    # Only a query string: the path is ours, so this never leads off the site.
    return f"{page}?{query}" if query and len(query) < 2000 and query.isprintable() else page
