"""Browser pages. Thin: a selector or one service per view, then a template or a fragment."""

from __future__ import annotations

import math
import shlex
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

from portal.errors import ApplicationError, ErrorItem
from portal.http import SignedInRequest
from portal.selectors import project_list_for_user
from scheduling import engine, services
from scheduling.decisions.humanize import count, format_duration, format_memory
from scheduling.decisions.levels import HIGH, LEVELS
from scheduling.forms import FIELD_FOR_ERROR, MAIN_FIELDS, MORE_FIELDS, TaskSubmitForm
from scheduling.models import TERMINAL_STATES, Task, TaskState, WorkflowState
from scheduling.presenters.dag import boxes_svg, dag_picture, edge_kind, edges_svg
from scheduling.presenters.efficiency import task_efficiency
from scheduling.presenters.starters import STARTERS, starter_initial
from scheduling.presenters.workflow_rows import rows_html
from scheduling.selectors import (
    can_change_task,
    task_get_for_user,
    task_list_for_user,
    workflow_get_for_user,
    workflow_list_for_user,
)
from scheduling.selectors.waiting import explain

LOG_LIMIT = 256 * 1024


@login_required
def task_list(request: SignedInRequest) -> HttpResponse:
    tasks = task_list_for_user(request.user).order_by("-id")
    state = request.GET.get("state") or ""
    if state:
        tasks = tasks.filter(state=state)
    page = Paginator(tasks, 50).get_page(request.GET.get("page"))
    # htmx polls the rows every 2 s; it gets only the <tr>s, not the page around them.
    template = "scheduling/task_rows.html" if request.htmx else "scheduling/task_list.html"
    context = {"page": page, "state": state, "states": TaskState.choices}
    return render(request, template, context)


@login_required
def task_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk)
    try:
        log = engine.task_log(task=task, limit=LOG_LIMIT)
        log_error = ""
    except ApplicationError as exc:  # the backend is away: the rest of the page still helps
        log, log_error = "", str(exc)
    context = {
        "task": task,
        "asked": _asked(task.spec),
        "command": shlex.join(task.spec.get("command") or []) or "(a script; see the descriptor)",
        "events": task.events.all(),
        "attempts": task.attempt_set.all(),
        "log": log,
        "log_error": log_error,
        "live": not task.is_terminal,
        "wait": explain(task),
        "level": LEVELS[task.level],
        "can_change": (can_change := can_change_task(request.user, task)),
        "can_ask": can_change and not task.is_terminal and task.level < HIGH,
        "requests": task.priority_requests.select_related("decided_by").order_by("-id"),
        "efficiency": task_efficiency(task) if task.is_terminal else None,
    }
    # While the task lives, htmx re-fetches the status block (state, timeline, log) every 2 s.
    template = "scheduling/task_status.html" if request.htmx else "scheduling/task_detail.html"
    return render(request, template, context)


@login_required
@require_POST
def task_cancel(request: SignedInRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk, change=True)
    try:
        services.task_cancel(user=request.user, task=task)
    except ApplicationError as exc:
        messages.error(request, str(exc))
    else:
        done = "is being cancelled" if task.cancelling else "is cancelled"
        messages.success(request, f"Task {task.name} {done}.")
    return redirect("task-detail", pk=task.pk)


@login_required
def task_submit(request: SignedInRequest) -> HttpResponse:
    projects = list(
        project_list_for_user(request.user).order_by("slug").values_list("slug", flat=True)
    )
    if request.method == "POST":
        form = TaskSubmitForm(request.POST, request.FILES, projects=projects)
    else:
        form = TaskSubmitForm(projects=projects, initial=_initial(request, projects))
    errors: list[ErrorItem] = []
    if form.is_bound and form.is_valid():
        text, fmt = form.descriptor_text()
        try:
            # A descriptor may be a Task or a whole Workflow; the fields always make a Task.
            made = services.descriptor_submit(user=request.user, text=text, fmt=fmt)
        except ApplicationError as exc:
            errors = _attach(form, exc)
        else:
            if isinstance(made, Task):
                return redirect("task-detail", pk=made.pk)
            return redirect("workflow-detail", pk=made.pk)
    context = {
        "form": form,
        "errors": errors,
        # Descriptor errors are listed beside the box or the file they came from.
        "errors_at": form.source if errors else None,
        "main_fields": [form[name] for name in MAIN_FIELDS],
        "more_fields": [form[name] for name in MORE_FIELDS],
        "more_open": any(form[name].errors or form[name].value() for name in MORE_FIELDS),
        "starters": [(kind, starter["label"]) for kind, starter in STARTERS.items()],
        "starter": request.GET.get("template", ""),
    }
    return render(
        request,
        "scheduling/task_submit.html",
        context,
        status=400 if form.is_bound else 200,
    )


@login_required
def workflow_list(request: SignedInRequest) -> HttpResponse:
    ended = Q(tasks__state__in=TERMINAL_STATES)
    found = workflow_list_for_user(request.user).annotate(
        total=Count("tasks", distinct=True), ended=Count("tasks", filter=ended, distinct=True)
    )
    state = request.GET.get("state") or ""
    if state:
        found = found.filter(state=state)
    page = Paginator(found.order_by("-id"), 50).get_page(request.GET.get("page"))
    template = "scheduling/workflow_rows.html" if request.htmx else "scheduling/workflow_list.html"
    context = {"page": page, "state": state, "states": WorkflowState.choices}
    return render(request, template, context)


LATEST_EPOCH_S = 253402300799  # 9999-12-31T23:59:59Z, the last moment a datetime holds
DEPS_SHOWN = 3  # dependencies a row of the workflow's table names; the graph has them all
# What the workflow page shows of each task (the descriptor and spec stay in the database).
_ROW_FIELDS = ("id", "name", "state", "reason", "exit_code", "attempts", "retry_count",
               "fail_action", "cancel_requested_at", "workflow_id", "queue__name")  # fmt: skip


@login_required
def workflow_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    workflow = workflow_get_for_user(request.user, pk)
    since = time.time()  # what the live updates send is what changed after this
    tasks = list(workflow.tasks.select_related("queue").only(*_ROW_FIELDS).order_by("id"))
    by_id = {task.pk: task for task in tasks}
    # Dependencies as id pairs (a model instance per edge was most of a big workflow's
    # time), in id order: the order they were written in the descriptor.
    depends_on: dict[int, list[int]] = {task.pk: [] for task in tasks}
    pairs = Task.depends_on.through.objects.filter(from_task__workflow=workflow)
    for task_id, dep_id in pairs.order_by("to_task_id").values_list("from_task_id", "to_task_id"):
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
        "live": any(task.state not in TERMINAL_STATES for task in tasks),
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
            {"errors": [{"field": "since", "message": "expected seconds since the epoch "
                                    f"(0 to {LATEST_EPOCH_S})",
                         "got": request.GET.get("since", "")[:40]}]},
            status=400,
        )  # fmt: skip
    now = time.time()
    after = datetime.fromtimestamp(since - LIVE_OVERLAP_S, tz=UTC)
    changed = workflow.tasks.filter(updated_at__gt=after).order_by("id")
    states = dict(workflow.tasks.values_list("state").annotate(n=Count("id")).order_by())
    return JsonResponse(
        {
            "since": f"{now:.6f}",
            "workflow": {"state": workflow.state, "reason": workflow.reason},
            "counts": _counts(states),
            "live": any(state not in TERMINAL_STATES for state in states),
            "tasks": [_task_change(task) for task in changed],
        }
    )


def _task_change(task: Task) -> dict[str, Any]:
    return {
        "id": task.pk,
        "state": task.state,
        "shown": task.display_state,
        "exit_code": task.exit_code if task.state != "succeeded" else None,
        "attempts": task.attempts,
        "reason": task.reason,
        "edges": edge_kind(task),  # of the arrows leaving it
    }


def _counts(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    """(state, number of tasks) in the order states are listed."""
    return sorted(counts.items(), key=lambda kv: _STATE_ORDER.index(kv[0]))


_STATE_ORDER = [state.value for state in TaskState]


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


def _initial(request: SignedInRequest, projects: list[str]) -> dict[str, Any]:
    """A template's fields (`?template=agent`), or a task's own descriptor to submit again
    (`?from=42`, a task you may see)."""
    initial: dict[str, Any] = {"project": projects[0]} if projects else {}
    if request.GET.get("from"):
        task = task_get_for_user(request.user, request.GET["from"])
        if task.spec.get("secret_env"):
            messages.info(
                request,
                "Its secret_env values are never shown (••••): enter them again before submitting.",
            )
        return {**initial, "descriptor": task.descriptor}
    return {**initial, **(starter_initial(request.GET.get("template", "")) or {})}


def _attach(form: TaskSubmitForm, exc: ApplicationError) -> list[ErrorItem]:
    """Put each error beside the form field it names; return the rest to list together."""
    rest = []
    for err in exc.errors:
        target = FIELD_FOR_ERROR.get(err.field or "") if form.source == "fields" else None
        if target:
            form.add_error(target, err.message)
        else:
            rest.append(err)
    return rest


def _asked(spec: dict[str, Any]) -> str:
    """What the task asked for, in the units its author wrote them in."""
    res = spec.get("resources") or {}
    parts = [count(res.get("cpus", 1), "CPU"), count(res.get("gpus", 0), "GPU")]
    parts.append(f"{format_memory(res.get('memory_mib', 1024))} per node")
    if res.get("nodes"):
        parts.insert(0, count(res["nodes"], "node"))
    if spec.get("walltime_s"):
        parts.append(f"walltime {format_duration(spec['walltime_s'])}")
    if spec.get("estimate_s"):
        parts.append(f"estimate {format_duration(spec['estimate_s'])}")
    return " · ".join(parts)
