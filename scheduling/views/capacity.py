"""The Capacity page: nodes and their health, leases, alerts. Platform admins drain, resume and
lend any node and keep the nightly lease schedules; a queue admin drains and resumes the nodes
of their queues' pools."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInRequest
from portal.parsing import parse_until
from scheduling import services
from scheduling.forms_admin import LeaseScheduleForm
from scheduling.selectors.capacity import (
    LeaseStates,
    NodeStates,
    alert_list_for_user,
    borrowing_for_pools,
    capacity_pools_for_user,
    image_caches_for_pools,
    lease_list_for_user,
    lease_schedule_get,
    lease_schedule_list,
    node_in_pools,
    node_rows,
    tasks_on_node,
)
from scheduling.selectors.queues import queue_list_by_name
from scheduling.services.lease_schedules import lease_schedule_delete, lease_schedule_save


def _platform_admin(request: SignedInRequest) -> None:
    if not roles.is_platform_admin(request.user):
        raise Http404("no such page")


def _pools(request: SignedInRequest):
    return capacity_pools_for_user(request.user)


@login_required
def capacity(request: SignedInRequest) -> HttpResponse:
    return _page(request)


def _page(request: SignedInRequest, status: int = 200, **extra: Any) -> HttpResponse:
    """The page; `extra` carries a form that was not saved, with its errors in place."""
    pools = _pools(request).prefetch_related("nodes__pool")
    if not pools:
        raise Http404("no such page")
    admin = roles.is_platform_admin(request.user)
    leases = lease_list_for_user(request.user)  # the same selector as the API's
    context = {
        "platform_admin": admin,
        "pools": pools,
        "nodes": node_rows(pools, request.user),
        "queues": queue_list_by_name(),
        "active": leases.filter(state=LeaseStates.ACTIVE),
        "past": leases.filter(state=LeaseStates.ENDED)[:20],
        "alerts": alert_list_for_user(request.user, pools)[:30],
        "image_caches": image_caches_for_pools(pools),
        "borrowing": borrowing_for_pools(pools),
        "now": timezone.now(),
        "lend": {"count": "1", "until": "4h"},
        "lend_errors": {},
    }
    if admin:
        bound = extra.pop("schedule_form", None)
        context["schedules"] = [
            bound
            if bound is not None and bound.schedule == s
            else LeaseScheduleForm.for_schedule(s)
            for s in lease_schedule_list()
        ]
        new_bound = bound is not None and bound.schedule is None
        context["new_schedule"] = bound if new_bound else LeaseScheduleForm.for_schedule(None)
    context.update(extra)
    return render(request, "scheduling/capacity.html", context, status=status)


@login_required
@require_POST
def node_state(request: SignedInRequest, pk: int, state: str) -> HttpResponse:
    if state not in NodeStates.values:
        raise Http404("no such state")
    node = node_in_pools(pk, _pools(request))
    if node is None:
        raise Http404("no such node")
    reason = request.POST.get("reason", "").strip()
    if state != NodeStates.UP and request.POST.get("confirm") != "yes":
        # What runs there is said before anything changes (docs/capacity.md).
        tasks, others = tasks_on_node(node, request.user)
        context = {"node": node, "state": state, "reason": reason, "tasks": tasks, "others": others}
        return render(request, "scheduling/node_confirm.html", context)
    services.nodes_set_state(
        nodes=[node],
        state=state,
        reason=reason or f"set {state} on the Capacity page",
        by=request.user.get_username(),
        user=request.user,
    )
    messages.success(request, f"Node {node.name}: {state}; its backend follows.")
    return redirect("capacity")


@login_required
@require_POST
def lend(request: SignedInRequest) -> HttpResponse:
    _platform_admin(request)
    posted = {k: request.POST.get(k, "") for k in ("count", "pool", "queue", "until", "reason")}
    try:
        count = _whole_number(posted["count"])
        until = parse_until(posted["until"])
        lease = services.lease_open(
            user=request.user,
            pool=posted["pool"],
            queue=posted["queue"],
            count=count,
            duration_s=int((until - timezone.now()).total_seconds()),
            reason=posted["reason"],
        )
    except ApplicationError as exc:
        if exc.status == 403:
            raise Http404("no such page") from None
        errors = {item.field or "count": item.message for item in exc.errors}
        return _page(request, 400, lend=posted, lend_errors=errors, not_saved="lend")
    names = ", ".join(n.name for n in lease.nodes.all())
    messages.success(request, f"Lease #{lease.pk}: {names} lent to {lease.queue.name}.")
    return redirect("capacity")


def _whole_number(text: str) -> int:
    if not text.strip().isdigit():
        raise ApplicationError("a whole number of nodes", field="count", got=text[:20])
    return int(text)


@login_required
@require_POST
def lease_end(request: SignedInRequest, pk: int) -> HttpResponse:
    _platform_admin(request)
    try:
        lease = services.lease_end(user=request.user, lease_id=pk)
    except ApplicationError as exc:
        if exc.status == 404:
            raise Http404("no such lease") from None
        messages.error(request, str(exc))
    else:
        messages.success(
            request, f"Lease #{lease.pk} ends now: work still on its nodes is requeued."
        )
    return redirect("capacity")


@login_required
@require_POST
def lease_schedule(request: SignedInRequest, pk: int | None = None) -> HttpResponse:
    """Add a nightly lease (no `pk`), change one, or remove it (`delete` posted)."""
    _platform_admin(request)
    schedule = lease_schedule_get(pk) if pk is not None else None
    if pk is not None and schedule is None:
        raise Http404("no such lease schedule")
    form = LeaseScheduleForm.for_schedule(schedule, request.POST)
    reason = form.reason_value = request.POST.get(f"{form.prefix}-reason", "")
    try:
        if schedule is not None and "delete" in request.POST:
            lease_schedule_delete(user=request.user, schedule=schedule, reason=reason)
            messages.success(request, f"Nightly lease #{pk} removed.")
            return redirect("capacity")
        if form.is_valid():
            saved = lease_schedule_save(
                user=request.user, schedule=schedule, reason=reason, **form.schedule_values()
            )
            messages.success(request, f"Nightly lease #{saved.pk} saved: {saved}.")
            return redirect("capacity")
    except ApplicationError as exc:
        for item in exc.errors:
            field = form.field_for(item.field)
            if field is not None and field not in form.errors:
                form.add_error(field, item.message)
            elif field is None:
                form.reason_error = item.message
    return _page(request, 400, schedule_form=form, not_saved="schedule")
