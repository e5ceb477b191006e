"""Workflow pages: the list, one workflow (its table, its graph, live updates), cancelling.
Thin, like scheduling/views/tasks.py."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Q
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling import services
from scheduling.decisions import lifecycle
from scheduling.presenters.dag import boxes_svg, dag_picture, edge_kind, edges_svg
from scheduling.presenters.states import WORKFLOW_STATE_CHOICES
from scheduling.presenters.workflow_rows import rows_html
from scheduling.selectors import workflow_get_for_user, workflow_list_for_user
from scheduling.selectors.access import workflow_dependency_pairs


@login_required
def workflow_list(request: SignedInRequest) -> HttpResponse:
    ended = Q(tasks__state__in=lifecycle.TERMINAL)
    found = workflow_list_for_user(request.user).annotate(
        total=Count("tasks", distinct=True), ended=Count("tasks", filter=ended, distinct=True)
    )
    state = request.GET.get("state") or ""
    if state:
        found = found.filter(state=state)
    page = Paginator(found.order_by("-id"), 50).get_page(request.GET.get("page"))
    template = "scheduling/workflow_rows.html" if request.htmx else "scheduling/workflow_list.html"
    context = {"page": page, "state": state, "states": WORKFLOW_STATE_CHOICES}
    return render(request, template, context)


LATEST_EPOCH_S = 253402300799  # 9999-12-31T23:59:59Z, the last moment a datetime holds
DEPS_SHOWN = 3  # dependencies a row of the workflow's table names; the graph has them all
# What the workflow page shows of each task (the descriptor and spec stay in the database).
_ROW_FIELDS = (
    "id",
    "name",
    "state",
    "reason",
    "exit_code",
    "attempts",
    "retry_count",
    "fail_action",
    "cancel_requested_at",
    "workflow_id",
    "queue__name",
)


@login_required
def workflow_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    workflow = workflow_get_for_user(request.user, pk)
    since = time.time()  # what the live updates send is what changed after this
    tasks = list(workflow.tasks.select_related("queue").only(*_ROW_FIELDS).order_by("id"))
    by_id = {task.pk: task for task in tasks}
    # Dependencies as id pairs, in the order they were written in the descriptor.
    depends_on: dict[int, list[int]] = {task.pk: [] for task in tasks}
    for task_id, dep_id in workflow_dependency_pairs(workflow):
        depends_on[task_id].append(dep_id)
    rows = []
    for task in tasks:
        inside = [by_id[d] for d in depends_on[task.pk] if d in by_id]
        outside = [d for d in depends_on[task.pk] if d not in by_id]
        more = max(0, len(inside) - DEPS_SHOWN) + max(0, len(outside) - DEPS_SHOWN)
        rows.append((task, inside[:DEPS_SHOWN], outside[:DEPS_SHOWN], more))
    picture = dag_picture(tasks, depends_on)
    tasks_url = reverse("task-detail", args=[0]).removesuffix("0/")  # a task's: + id + "/"
    context = {
        "workflow": workflow,
        "rows_html": rows_html(rows, tasks_url),
        "picture": picture,
        "edges_svg": edges_svg(picture.edges),
        "boxes_svg": boxes_svg(picture, reverse("task-detail", args=[0])),
        "counts": _counts(Counter(task.state for task in tasks)),
        # Live while a task can still move: a failed (aborted) workflow may still have
        # tasks running on other branches.
        "live": any(task.state not in lifecycle.TERMINAL for task in tasks),
        "since": f"{since:.6f}",
    }
    template = (
        "scheduling/workflow_status.html" if request.htmx else "scheduling/workflow_detail.html"
    )
    return render(request, template, context)


# The live update re-sends what changed this long before the last one asked: a change is
# stamped when it is made, and may commit a little later (docs/workflows.md).
LIVE_OVERLAP_S = 10.0


@login_required
def workflow_changes(request: SignedInRequest, pk: int) -> JsonResponse:
    """What changed in a workflow since `?since=` (seconds since the epoch, as the page or
    the last update gave it): the workflow's state, its counts, and each task that changed,
    with what its row and its box in the graph show. A few hundred bytes per changed task,
    where the page itself is megabytes for a thousand tasks."""
    workflow = workflow_get_for_user(request.user, pk)
    try:
        since = float(request.GET.get("since", ""))
    except ValueError:
        since = math.nan
    # NaN, the infinities and times past year 9999 are no moment a datetime can hold.
    if not 0 <= since <= LATEST_EPOCH_S:
        return JsonResponse(
            {
                "errors": [
                    {
                        "field": "since",
                        "message": f"expected seconds since the epoch (0 to {LATEST_EPOCH_S})",
                        "got": request.GET.get("since", "")[:40],
                    }
                ]
            },
            status=400,
        )
    now = time.time()
    after = datetime.fromtimestamp(since - LIVE_OVERLAP_S, tz=UTC)
    changed = workflow.tasks.filter(updated_at__gt=after).order_by("id")
    states = dict(workflow.tasks.values_list("state").annotate(n=Count("id")).order_by())
    return JsonResponse(
        {
            "since": f"{now:.6f}",
            "workflow": {"state": workflow.state, "reason": workflow.reason},
            "counts": _counts(states),
            "live": any(state not in lifecycle.TERMINAL for state in states),
            "tasks": [_task_change(task) for task in changed],
        }
    )


def _task_change(task) -> dict[str, Any]:
    return {
        "id": task.pk,
        "state": task.state,
        "shown": task.display_state,
        "exit_code": task.exit_code if task.state != lifecycle.SUCCEEDED else None,
        "attempts": task.attempts,
        "reason": task.reason,
        "edges": edge_kind(task),  # of the arrows leaving it
    }


def _counts(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """(state, number of tasks) in the order states are listed."""
    return sorted(counts.items(), key=lambda kv: _STATE_ORDER.index(kv[0]))


_STATE_ORDER = list(lifecycle.TASK_STATES)


@login_required
@require_POST
def workflow_cancel(request: SignedInRequest, pk: int) -> HttpResponse:
    workflow = workflow_get_for_user(request.user, pk)
    try:
        services.workflow_cancel(user=request.user, workflow=workflow)
    except ApplicationError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Workflow {workflow.name}: every unfinished task is cancelled.")
    return redirect("workflow-detail", pk=workflow.pk)
