"""Task pages: the list, one task and submitting (cancelling: views/task_cancel.py). Thin:
a selector or one service per view, then a template or a fragment."""

from __future__ import annotations

import math
import shlex
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError, ErrorItem
from portal.http import SignedInRequest
from portal.selectors import project_list_for_user
from portal.throttles import throttled
from scheduling import services
from scheduling.decisions.humanize import count, format_duration, format_memory
from scheduling.decisions.levels import HIGH, LEVELS
from scheduling.forms import MAIN_FIELDS, MORE_FIELDS, TaskSubmitForm, field_for_error
from scheduling.presenters.efficiency import task_efficiency, task_gpu_use
from scheduling.presenters.files import (
    folder_picker,
    picked_input,
    picked_workdir,
    task_workdir_link,
    with_input,
)
from scheduling.presenters.resubmit import form_fields
from scheduling.presenters.runtimes import task_prediction
from scheduling.presenters.starters import EXAMPLE_PROJECT, STARTERS, example, starter_initial
from scheduling.presenters.states import TASK_STATE_CHOICES
from scheduling.presenters.task_list import rows as task_rows
from scheduling.presenters.task_list import unstarted
from scheduling.selectors import (
    can_change_task,
    can_see_workflow,
    task_get_for_user,
    task_list_for_user,
)
from scheduling.selectors.logs import task_log_end
from scheduling.selectors.sandboxes import sandbox_of_task, sandboxes_of_task
from scheduling.selectors.task_filters import (
    filter_choices,
    filter_tasks,
    parse_task_filters,
    task_page,
)
from scheduling.selectors.waiting import explain
from scheduling.spec import TASK_TYPES

LOG_LIMIT = 256 * 1024


@login_required
def task_list(request: SignedInRequest) -> HttpResponse:
    filters, filter_errors = parse_task_filters(request.GET)
    tasks = filter_tasks(task_list_for_user(request.user), filters)
    page, listed = task_page(tasks, request.GET.get("page"))
    # htmx polls the rows every 2 s; it gets only the <tr>s, not the page around them.
    template = "scheduling/task_rows.html" if request.htmx else "scheduling/task_list.html"
    context = {
        "page": page,
        "rows": task_rows(listed, timezone.now()),
        "filters": filters,
        "filter_errors": filter_errors,
        "query": filters.query(),
        "states": TASK_STATE_CHOICES,
        "types": TASK_TYPES,
        # The refresh swaps rows only: the filters' lists are read for the whole page.
        **({} if request.htmx else filter_choices(request.user)),
    }
    return render(request, template, context, status=400 if filter_errors else 200)


@login_required
def task_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk)
    try:
        log, log_skipped = task_log_end(task=task, limit=LOG_LIMIT)
        log_error = ""
    except ApplicationError as exc:  # the backend is away: the rest of the page still helps
        log, log_skipped, log_error = "", 0, str(exc)
    context = {
        "task": task,
        "asked": _asked(task.spec),
        "command": shlex.join(task.spec.get("command") or []) or "(a script; see the descriptor)",
        "events": task.events.all(),
        "attempts": task.attempt_set.all(),
        "log": log,
        "log_skipped": log_skipped,
        "log_error": log_error,
        "live": not task.is_terminal,
        "wait": explain(task),
        "level": LEVELS[task.level],
        "can_change": (can_change := can_change_task(request.user, task)),
        # A level orders waiting work only: once started, a task has what it needs.
        "can_ask": can_change and unstarted(task) and task.level < HIGH,
        "unstarted": unstarted(task),
        "workflow_visible": can_see_workflow(request.user, task.workflow_id),
        "requests": task.priority_requests.select_related("decided_by").order_by("-id"),
        "efficiency": task_efficiency(task) if task.is_terminal else None,
        "gpu_use": task_gpu_use(task) if task.is_terminal else None,
        "prediction": task_prediction(task),
        "workdir": task_workdir_link(request.user, task),
        # The live sandboxes it created with its scoped token, or the one it is.
        "sandboxes": sandboxes_of_task(task),
        "own_sandbox": sandbox_of_task(task),
    }
    # While the task lives, htmx re-fetches the status block (state, timeline, log) every 2 s.
    template = "scheduling/task_status.html" if request.htmx else "scheduling/task_detail.html"
    return render(request, template, context)


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
            if made._meta.model_name == "task":
                return redirect("task-detail", pk=made.pk)
            return redirect("workflow-detail", pk=made.pk)
    context = {
        "form": form,
        "errors": errors,
        # Descriptor errors are listed beside the box or the file they came from.
        "errors_at": form.source if errors else None,
        "main_fields": [form[name] for name in MAIN_FIELDS],
        "more_fields": [form[name] for name in MORE_FIELDS if name not in ("workdir", "inputs")],
        "workdir_field": form["workdir"],
        "inputs_field": form["inputs"],
        "more_open": any(form[name].errors or form[name].value() for name in MORE_FIELDS),
        "starters": [(kind, starter["label"]) for kind, starter in STARTERS.items()],
        "starter": request.GET.get("template", ""),
        "agent_example": example("agent-tool-calls.yaml", (projects or [EXAMPLE_PROJECT])[0]),
    }
    return render(
        request,
        "scheduling/task_submit.html",
        context,
        status=400 if form.is_bound else 200,
    )


@login_required
@require_POST
def task_submit_preview(request: SignedInRequest) -> HttpResponse:
    """The submit page's live preview (htmx, as the fields change): what submitting the form
    as it stands would do. Stores nothing; bad input is shown in the fragment, never a 500.
    Counted with the user's API previews (`SWITCHYARD_PREVIEW_RATE`): past it, a 429 that
    htmx does not swap in, so the last preview stays on the page."""
    wait = throttled(request, "preview")
    if wait is not None:
        response = HttpResponse(
            f"Too many previews: try again in {math.ceil(wait)} s.",
            status=429,
            content_type="text/plain",
        )
        response["Retry-After"] = str(math.ceil(wait))
        return response
    projects = list(
        project_list_for_user(request.user).order_by("slug").values_list("slug", flat=True)
    )
    form = TaskSubmitForm(request.POST, request.FILES, projects=projects)
    context: dict[str, Any] = {"form_errors": [], "missing": [], "preview": None}
    if not form.is_valid():
        context["form_errors"] = [
            ErrorItem(str(form[name].label), " ".join(map(str, errors)), request.POST.get(name))
            for name, errors in form.errors.items()
        ]
    else:
        text, fmt, context["missing"] = form.preview_text()
        context["preview"] = services.submit_preview(user=request.user, text=text, fmt=fmt)
        context["source"] = form.source
    return render(request, "scheduling/submit_preview.html", context)


@login_required
def task_submit_folders(request: SignedInRequest) -> HttpResponse:
    """The submit form's folder picker (htmx): the folders and files at `?at=<Files path>`;
    with `?use=<Files path>` the working-folder field filled with the path jobs see; a POST
    of `input` (a Files path) and `inputs` (the Inputs box's text) answers the box with
    that path added."""
    if "use" in request.GET:
        try:
            workdir = picked_workdir(request.user, request.GET["use"])
        except ApplicationError as exc:  # htmx swaps no error in: the field stays as it was
            return HttpResponse(str(exc), status=exc.status, content_type="text/plain")
        field = TaskSubmitForm(projects=[], initial={"workdir": workdir})["workdir"]
        return render(request, "scheduling/workdir_input.html", {"field": field})
    if request.method == "POST":  # the Inputs box's text may hold line breaks: a body
        try:
            added = picked_input(request.user, request.POST.get("input", ""))
        except ApplicationError as exc:
            return HttpResponse(str(exc), status=exc.status, content_type="text/plain")
        text = with_input(request.POST.get("inputs", ""), added)
        field = TaskSubmitForm(projects=[], initial={"inputs": text})["inputs"]
        return render(request, "scheduling/inputs_box.html", {"field": field})
    try:
        context = folder_picker(request.user, request.GET.get("at", ""))
    except ApplicationError as exc:  # a folder not made yet, or not readable: said as it is
        context = {"error": str(exc), "at": request.GET.get("at", "")[:200], "rows": []}
    return render(request, "scheduling/folder_picker.html", context)


def _initial(request: SignedInRequest, projects: list[str]) -> dict[str, Any]:
    """A template's fields (`?template=agent`), or a task to submit again (`?from=42`, a task
    you may see): its fields when the form made it, else its own descriptor."""
    initial: dict[str, Any] = {"project": projects[0]} if projects else {}
    if request.GET.get("from"):
        task = task_get_for_user(request.user, request.GET["from"])
        if task.spec.get("secret_env"):
            messages.info(
                request,
                "Its secret_env values are never shown (••••): enter them again before submitting.",
            )
        fields = form_fields(task.descriptor, task.descriptor_format)
        if fields is not None:  # made with the fields: the fields again, its project chosen
            return {**initial, **fields}
        return {**initial, "descriptor": task.descriptor}
    project = initial.get("project", EXAMPLE_PROJECT)
    return {**initial, **(starter_initial(request.GET.get("template", ""), project) or {})}


def _attach(form: TaskSubmitForm, exc: ApplicationError) -> list[ErrorItem]:
    """Put each error beside the form field it names; return the rest to list together."""
    rest = []
    for err in exc.errors:
        target = field_for_error(err.field) if form.source == "fields" else None
        if target == "inputs":  # which line, and what it was
            form.add_error(target, f"{err.field}: {err.message} (got {err.got})")
        elif target:
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
