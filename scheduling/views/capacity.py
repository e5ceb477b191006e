"""The Capacity page: nodes and their health, leases, alerts. Platform admins drain, resume and
lend any node; a queue admin drains and resumes the nodes of their queues' pools."""

from __future__ import annotations

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
from scheduling.selectors.capacity import (
    LeaseStates,
    NodeStates,
    alert_list_for_user,
    borrowing_for_pools,
    capacity_pools_for_user,
    image_caches_for_pools,
    lease_list_for_user,
    node_in_pools,
)
from scheduling.selectors.queues import queue_list_by_name


def _platform_admin(request: SignedInRequest) -> None:
    if not roles.is_platform_admin(request.user):
        raise Http404("no such page")


def _pools(request: SignedInRequest):
    return capacity_pools_for_user(request.user)


@login_required
def capacity(request: SignedInRequest) -> HttpResponse:
    pools = _pools(request).prefetch_related("nodes")
    if not pools:
        raise Http404("no such page")
    admin = roles.is_platform_admin(request.user)
    leases = lease_list_for_user(request.user)  # the same selector as the API's
    alerts = alert_list_for_user(request.user, pools)
    context = {
        "platform_admin": admin,
        "pools": pools,
        "queues": queue_list_by_name(),
        "active": leases.filter(state=LeaseStates.ACTIVE),
        "past": leases.filter(state=LeaseStates.ENDED)[:20],
        "alerts": alerts[:30],
        "image_caches": image_caches_for_pools(pools),
        "borrowing": borrowing_for_pools(pools),
        "now": timezone.now(),
    }
    return render(request, "scheduling/capacity.html", context)


@login_required
@require_POST
def node_state(request: SignedInRequest, pk: int, state: str) -> HttpResponse:
    if state not in NodeStates.values:
        raise Http404("no such state")
    node = node_in_pools(pk, _pools(request))
    if node is None:
        raise Http404("no such node")
    services.nodes_set_state(
        nodes=[node],
        state=state,
        reason=request.POST.get("reason") or f"set {state} on the Capacity page",
        by=request.user.get_username(),
        user=request.user,
    )
    messages.success(request, f"Node {node.name}: {state}; its backend follows.")
    return redirect("capacity")


@login_required
@require_POST
def lend(request: SignedInRequest) -> HttpResponse:
    _platform_admin(request)
    try:
        count = int(request.POST.get("count", ""))
        until = parse_until(request.POST.get("until", ""))
        lease = services.lease_open(
            user=request.user,
            pool=request.POST.get("pool", ""),
            queue=request.POST.get("queue", ""),
            count=count,
            duration_s=int((until - timezone.now()).total_seconds()),
            reason=request.POST.get("reason", ""),
        )
    except ValueError:
        messages.error(request, "count: a whole number of nodes")
    except ApplicationError as exc:
        messages.error(request, f"{exc.errors[0].field or 'lease'}: {exc}")
    else:
        names = ", ".join(n.name for n in lease.nodes.all())
        messages.success(request, f"Lease #{lease.pk}: {names} lent to {lease.queue.name}.")
    return redirect("capacity")


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
