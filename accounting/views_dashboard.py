"""The dashboards: a researcher's own, and an operator's for their queues and pools. Both
refresh themselves (htmx swaps the fragment every 10 s; the charts are redrawn)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounting import dashboards, services
from portal.http import SignedInRequest


@login_required
def dashboard(request: SignedInRequest) -> HttpResponse:
    context = dashboards.researcher(request.user)
    template = "accounting/_dashboard.html" if request.htmx else "accounting/dashboard.html"
    return render(request, template, context)


@login_required
@require_POST
def dashboard_settings(request: SignedInRequest) -> HttpResponse:
    wanted = request.POST.get("email_on_task_end") == "on"
    services.settings_set_mail_on_end(request.user, wanted)
    if wanted and not request.user.email:
        messages.warning(request, "Saved, but your account has no e-mail address to send to.")
    else:
        messages.success(
            request,
            "You will get a mail when a task of yours ends."
            if wanted
            else "No more mails when your tasks end (a descriptor's notify: end still asks for one).",
        )
    return redirect("dashboard")


@login_required
def site_dashboard(request: SignedInRequest) -> HttpResponse:
    queues = dashboards.operator_queues(request.user)
    if not queues:
        raise Http404("no such page")
    context = {"queues": queues, **dashboards.site(request.user, queues)}
    template = (
        "accounting/_site_dashboard.html" if request.htmx else "accounting/site_dashboard.html"
    )
    return render(request, template, context)
