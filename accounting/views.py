"""The Usage pages: reports with charts and downloads, a task's usage, reconciliations, the
rate card."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from accounting import charts, reports, selectors, services
from accounting.metrics import METRICS
from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling import usage as scheduling_usage
from scheduling.decisions.humanize import format_duration
from scheduling.spec import TASK_TYPES
from scheduling.usage import task_get_for_user


@login_required
def usage(request: SignedInRequest) -> HttpResponse:
    error = None
    try:
        q = reports.parse_query(request.GET)
    except ApplicationError as exc:
        error = exc.errors[0]
        q = reports.parse_query({})
    if q.by_record:  # a page shows groups; every record comes as a download
        q = reports.UsageQuery(q.start, q.end, (), q.period, q.filters)
    rows = reports.report(request.user, q)
    for row in rows:
        if "period" in row:
            row["period_label"] = reports.period_label(row["period"], q.period)
    totals = reports.totals(request.user, q)
    metrics_seen = [t["metric"] for t in totals]
    chart_metric = q.filters.get("metric") or (
        "gpu" if "gpu" in metrics_seen else (metrics_seen[0] if metrics_seen else "cpu")
    )
    dimension = next((g for g in q.group_by if g != "metric"), None)
    by_day, per = rows, q.period
    if q.period == "all":  # the chart over time still needs periods
        by_day, per = (
            reports.report(
                request.user, reports.UsageQuery(q.start, q.end, q.group_by, "day", q.filters)
            ),
            "day",
        )
    by_project = reports.report(
        request.user, reports.UsageQuery(q.start, q.end, ("project",), "all", q.filters)
    )
    figures = {
        "over_time": charts.over_time(
            by_day,
            dimension=dimension,
            metric=chart_metric,
            unit=METRICS[chart_metric].unit,
            period=per,
        ),
        "share": charts.share(
            by_project,
            by="project",
            value="charge",
            title=f"charges by project ({settings.SWITCHYARD_CURRENCY})",
        ),
        "utilisation": charts.utilisation(reports.pool_utilisation(request.user, q)),
    }
    params = q.params()
    context = {
        "q": q,
        "params": params,
        "error": error,
        "rows": rows,
        "totals": totals,
        "storage_by_area": reports.storage_by_area(request.user, q),
        "figures": figures,
        "currency": settings.SWITCHYARD_CURRENCY,
        "columns": [g for g in q.group_by if g != "metric"],
        "downloads": {
            fmt: "/api/v1/usage/?" + urlencode({**params, "format": fmt}) for fmt in ("csv", "xlsx")
        },
        "record_downloads": {
            fmt: "/api/v1/usage/?" + urlencode({**params, "group_by": "record", "format": fmt})
            for fmt in ("csv", "xlsx")
        },
        "sees_all": reports.sees_all(request.user),
        "options": _options(request),
    }
    template = "accounting/_report.html" if request.htmx else "accounting/usage.html"
    return render(request, template, context)


def _options(request: SignedInRequest) -> dict:
    return {
        "project": selectors.report_projects(request.user, sees_all=reports.sees_all(request.user)),
        "queue": scheduling_usage.queue_names(),
        "pool": scheduling_usage.pool_names(),
        "type": list(TASK_TYPES),
        "area": [area.name for area in scheduling_usage.storage_areas()],
        "metric": list(METRICS),
        "group_by": list(reports.GROUPS),
        "period": list(reports.PERIODS),
    }


@login_required
def task_usage(request: SignedInRequest, pk: int) -> HttpResponse:
    task = task_get_for_user(request.user, pk)  # 404 outside your projects
    return render(
        request, "accounting/_task_usage.html", {"task": task, **services.task_usage(task)}
    )


@login_required
def reconciliations(request: SignedInRequest) -> HttpResponse:
    if not reports.sees_all(request.user):
        raise Http404("no such page")
    runs = selectors.reconciliations_recent(50)
    every = timedelta(seconds=settings.SWITCHYARD_RECONCILE_SECONDS)
    return render(
        request,
        "accounting/reconciliations.html",
        {
            "runs": runs,
            "last": runs[0] if runs else None,
            # The beat runs it every `every`: the next one about that long after the last.
            "next_run": runs[0].ran_at + every if runs else None,
            "every": format_duration(int(every.total_seconds())),
            "can_run": roles.is_platform_admin(request.user),
        },
    )


@login_required
@require_GET
def rates(request: SignedInRequest) -> HttpResponse:
    """The rate card, read-only: what each queue's usage costs per unit, now and from when a
    new price applies (rates are changed in the admin console, versioned)."""
    return render(
        request,
        "accounting/rates.html",
        {
            "rates": selectors.rate_card(timezone.now()),
            "can_edit": roles.is_platform_admin(request.user),
        },
    )


@login_required
@require_POST
def reconcile_now(request: SignedInRequest) -> HttpResponse:
    if not roles.is_platform_admin(request.user):
        raise Http404("no such page")
    started = services.reconcile_now()
    at = f"{started.since:%Y-%m-%d %H:%M:%S} UTC"
    if started.already:
        messages.warning(
            request,
            f"A reconciliation asked at {at} is still queued or running: its results appear "
            "here when it ends.",
        )
    else:
        messages.success(
            request,
            f"Reconciliation started at {at}: a worker reconciles every backend, and the "
            "results appear here when it ends.",
        )
    return redirect("usage-reconciliations")
