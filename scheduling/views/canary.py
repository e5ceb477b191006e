"""The canary page: try new routing and level rules on a share of submissions, compare, then
promote or abandon them (platform admins; docs/console.md)."""

from __future__ import annotations

import json

import yaml
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from scheduling.selectors.canary import canary_active, canary_get, canary_past, canary_results
from scheduling.services.canary import canary_end, canary_start, current_rule_set


def _admin(request: SignedInRequest) -> None:
    if not roles.is_platform_admin(request.user):
        raise Http404("no such page")


@login_required
def canary_page(request: SignedInRequest) -> HttpResponse:
    _admin(request)
    errors = []
    form = {
        "name": "",
        "share_percent": "10",
        "rules": yaml.safe_dump(current_rule_set(), sort_keys=False),
        "reason": "",
    }
    if request.method == "POST":
        form = {k: request.POST.get(k, "") for k in form}
        try:
            rule_set = yaml.safe_load(form["rules"])
        except yaml.YAMLError as exc:
            errors = [f"rules: not YAML or JSON ({str(exc).splitlines()[0]})"]
        else:
            try:
                share: int | str = int(form["share_percent"])
            except ValueError:
                share = form["share_percent"]
            try:
                made = canary_start(
                    user=request.user,
                    name=form["name"],
                    share_percent=share,
                    rule_set=rule_set,
                    reason=form["reason"],
                )
            except ApplicationError as exc:
                errors = [f"{e.field or 'canary'}: {e.message}" for e in exc.errors]
            else:
                messages.success(
                    request, f"Canary {made.name} takes {made.share_percent} % of new submissions."
                )
                return redirect("canary")
    active = canary_active()
    context = {
        "active": active,
        "results": canary_results(active) if active else [],
        "past": [(c, canary_results(c)) for c in canary_past(5)],
        "form": form,
        "errors": errors,
        "active_rules": json.dumps(
            {"routing_rules": active.routing_rules, "level_rules": active.level_rules}, indent=1
        )
        if active
        else "",
    }
    template = "scheduling/_canary_results.html" if request.htmx else "scheduling/canary.html"
    return render(request, template, context, status=400 if errors else 200)


@login_required
@require_POST
def canary_decide(request: SignedInRequest, pk: int, verdict: str) -> HttpResponse:
    _admin(request)
    if verdict not in ("promote", "abandon"):
        raise Http404("no such decision")
    canary = canary_get(pk)
    if canary is None:
        raise Http404("no such canary")
    try:
        ended = canary_end(
            user=request.user,
            canary=canary,
            promote=verdict == "promote",
            reason=request.POST.get("reason", ""),
        )
    except ApplicationError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Canary {ended.name}: {ended.state}.")
    return redirect("canary")
