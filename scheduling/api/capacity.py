"""REST API v1 for capacity: node leases, current and past, and node states (docs/capacity.md).

Leases are shown to whom the Capacity page shows them (`selectors.capacity`): a lease anyone
else asks for does not exist for them."""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListCreateAPIView, RetrieveAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import checked_pk, json_object, parse_until
from scheduling import services
from scheduling.selectors.capacity import LeaseStates, NodeStates, lease_list_for_user, node_by_name
from scheduling.serializers import LeaseSerializer


class LeaseList(ListCreateAPIView):
    serializer_class = LeaseSerializer

    def get_queryset(self):
        leases = lease_list_for_user(self.request.user)
        state = self.request.query_params.get("state")
        if state is not None:
            if state not in LeaseStates.values:
                raise ApplicationError("must be active or ended", field="state", got=state[:80])
            leases = leases.filter(state=state)
        return leases

    @extend_schema(
        parameters=[OpenApiParameter("state", str, description="active or ended")],
        description="The leases the Capacity page shows you: every lease for a platform admin, "
        "those out of or into your queues' pools for a queue admin, none for anyone else.",
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=inline_serializer(
            "LeaseCreate",
            {
                "pool": serializers.CharField(),
                "queue": serializers.CharField(),
                "count": serializers.IntegerField(),
                "until": serializers.CharField(help_text="a duration (4h) or an ISO time"),
                "reason": serializers.CharField(required=False),
            },
        ),
        responses={201: LeaseSerializer},
        description="Lend idle nodes of a pool to another pool's queue (platform admins).",
    )
    def post(self, request: Request, *args, **kwargs) -> Response:
        # The default permission, IsAuthenticated, lets only a signed-in user in.
        user = cast(User, request.user)
        data = request.data if isinstance(request.data, dict) else {}
        count = data.get("count")
        if isinstance(count, bool) or not isinstance(count, int):
            raise ApplicationError("must be a whole number of nodes", field="count", got=count)
        until = parse_until(data.get("until"))
        lease = services.lease_open(
            user=user,
            pool=str(data.get("pool") or ""),
            queue=str(data.get("queue") or ""),
            count=count,
            duration_s=int((until - timezone.now()).total_seconds()),
            reason=str(data.get("reason") or ""),
        )
        return Response(LeaseSerializer(lease).data, status=status.HTTP_201_CREATED)


def _visible_lease(request: SignedInApiRequest, pk: int):
    try:
        lease = lease_list_for_user(request.user).filter(pk=checked_pk(pk)).first()
    except ValueError:  # an id no database holds
        lease = None
    if lease is None:
        raise ApplicationError("no such lease", status=404)
    return lease


class LeaseDetail(RetrieveAPIView):
    serializer_class = LeaseSerializer

    def get_object(self):
        return _visible_lease(self.request, self.kwargs["pk"])


class LeaseEnd(APIView):
    @extend_schema(
        request=None,
        responses={200: LeaseSerializer},
        description="Take a lease's nodes back now (platform admins): work still on them is "
        "requeued by the next capacity pass, which this asks for at once.",
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        lease = services.lease_end(user=request.user, lease_id=_visible_lease(request, pk).pk)
        return Response(LeaseSerializer(lease).data)


class NodeState(APIView):
    @extend_schema(
        request=inline_serializer("NodeStateChange", {"reason": serializers.CharField()}),
        responses={
            200: inline_serializer(
                "NodeStateAnswer",
                {
                    "node": serializers.CharField(),
                    "state": serializers.CharField(),
                    "changed": serializers.BooleanField(),
                },
            )
        },
        description="Drain (`drained`), mark down (`down`) or resume (`up`) a node: platform "
        "admins any node, queue admins the nodes of their queues' pools.",
    )
    def post(self, request: SignedInApiRequest, name: str, state: str) -> Response:
        node = node_by_name(name)
        if node is None or not roles.administers_pool(request.user, node.pool_id):
            raise ApplicationError("not found", status=404)
        if state not in NodeStates.values:
            raise ApplicationError("must be up, drained or down", field="state", got=state[:20])
        reason = json_object(request).get("reason") if request.data else None
        changed = services.nodes_set_state(
            nodes=[node],
            state=state,
            reason=str(reason or f"set {state} through the API"),
            by=request.user.get_username(),
            user=request.user,
        )
        return Response({"node": node.name, "state": state, "changed": bool(changed)})
