"""The Capacity page: nodes and their health, leases, alerts; admins drain, resume and lend."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.errors import ApplicationError
from scheduling import services
from scheduling.api_policy import parse_until
from scheduling.models import Alert, Node, NodeLease, Pool, Queue


def _platform_admin(request: HttpRequest) -> None:
    if not request.user.is_superuser:
        raise Http404("no such page")


@login_required
def capacity(request: HttpRequest) -> HttpResponse:
    _platform_admin(request)
    pools = Pool.objects.prefetch_related("nodes").order_by("name")
    context = {
        "pools": pools,
        "queues": Queue.objects.select_related("pool").order_by("name"),
        "active": NodeLease.objects.filter(state=NodeLease.State.ACTIVE)
        .select_related("pool", "queue")
        .prefetch_related("nodes"),
        "past": NodeLease.objects.filter(state=NodeLease.State.ENDED)
        .select_related("pool", "queue")
        .prefetch_related("nodes")[:20],
        "alerts": Alert.objects.select_related("node", "task")[:30],
        "now": timezone.now(),
    }
    return render(request, "scheduling/capacity.html", context)


@login_required
@require_POST
def node_state(request: HttpRequest, pk: int, state: str) -> HttpResponse:
    _platform_admin(request)
    if state not in Node.State.values:
        raise Http404("no such state")
    node = Node.objects.filter(pk=pk).first()
    if node is None:
        raise Http404("no such node")
    services.nodes_set_state(
        nodes=[node],
        state=state,
        reason=request.POST.get("reason") or f"set {state} on the Capacity page",
        by=request.user.get_username(),
    )
    messages.success(request, f"Node {node.name}: {state}; its backend follows.")
    return redirect("capacity")


@login_required
@require_POST
def lend(request: HttpRequest) -> HttpResponse:
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
def lease_end(request: HttpRequest, pk: int) -> HttpResponse:
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
