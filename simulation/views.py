"""The Simulations page: what-if runs of the simulator, started here, run by a worker, kept and
compared (platform admins and queue admins; anyone else gets a 404). docs/console.md."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from simulation import presenters as report
from simulation.selectors import (
    RunState,
    Workload,
    replayable_queues,
    simulation_get_for_user,
    simulation_list_for_user,
)
from simulation.services import MAX_REPEAT, simulation_start
from simulation.simulator.model import POLICIES

# htmx stops polling on this status (its documented "stop polling" code): the run has ended
# and the fragment it gets shows the results.
STOP_POLLING = 286
FIELDS = ("workload", "seed", "days", "limit", "repeat")


def _operator(request: SignedInRequest) -> None:
    if not roles.is_operator(request.user):
        raise Http404("no such page")


@login_required
def simulation_list(request: SignedInRequest) -> HttpResponse:
    _operator(request)
    form: dict[str, Any] = {name: "" for name in FIELDS}
    form.update(workload=Workload.DAY, policies=list(POLICIES), queues=[])
    errors = []
    if request.method == "POST":
        form = {name: request.POST.get(name, "") for name in FIELDS}
        form["policies"] = request.POST.getlist("policies")
        form["queues"] = request.POST.getlist("queues")
        try:
            run = simulation_start(
                user=request.user,
                workload=form["workload"],
                policies=form["policies"],
                seed=form["seed"],
                days=form["days"],
                limit=form["limit"],
                repeat=form["repeat"],
                upload=request.FILES.get("file"),
                queues=form["queues"],
            )
        except ApplicationError as exc:
            errors = exc.errors
        else:
            messages.success(request, f"Simulation #{run.pk} is queued; a worker runs it.")
            return redirect("simulation-detail", pk=run.pk)
    page = Paginator(simulation_list_for_user(request.user), 50).get_page(request.GET.get("page"))
    context = {
        "page": page,
        "form": form,
        "errors": errors,
        "error_fields": {e.field for e in errors},
        "workloads": Workload.choices,
        "policies": POLICIES,
        "max_repeat": MAX_REPEAT,
        "queues": replayable_queues(request.user),
        "platform_admin": roles.is_platform_admin(request.user),
        "max_upload": settings.SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES,
    }
    return render(
        request, "simulation/simulation_list.html", context, status=400 if errors else 200
    )


@login_required
def simulation_detail(request: SignedInRequest, pk: int) -> HttpResponse:
    run = simulation_get_for_user(request.user, pk)
    return render(request, "simulation/simulation_detail.html", _shown(run))


@login_required
def simulation_progress(request: SignedInRequest, pk: int) -> HttpResponse:
    """The run page's live block: progress while it runs, its results once it has ended."""
    run = simulation_get_for_user(request.user, pk)
    status = STOP_POLLING if request.htmx and not run.live else 200
    return render(request, "simulation/simulation_status.html", _shown(run), status=status)


@login_required
def simulation_compare(request: SignedInRequest) -> HttpResponse:
    _operator(request)
    ids = request.GET.getlist("run")
    if len(ids) != 2:
        messages.error(request, f"Compare: tick two runs (got {len(ids)}).")
        return redirect("simulation-list")
    runs = [simulation_get_for_user(request.user, pk) for pk in ids]
    labelled = [(f"#{r.pk} {r.workload}", r.result) for r in runs]
    context = {
        "runs": [(run, report.criteria_rows(run.result)) for run in runs],
        "rows": report.compare_rows(labelled),
        "figures": report.compare_figures(labelled),
    }
    return render(request, "simulation/simulation_compare.html", context)


def _shown(run) -> dict[str, Any]:
    done = run.state == RunState.SUCCEEDED
    return {
        "run": run,
        "criteria": report.criteria_rows(run.result),
        "policy_rows": report.policy_rows(run.result),
        "figures": report.figures(run.result) if done else None,
    }
