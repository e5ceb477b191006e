"""REST API v1 for allocations: read them with their use to date, ask for more, decide
(docs/accounting.md). Thin: read the request, call one service or selector, answer."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView, ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting import allocation_selectors as selectors
from accounting import allocation_services as services
from accounting.serializers import AllocationRequestSerializer, AllocationSerializer
from portal.errors import ApplicationError
from portal.http import SignedInApiRequest

STATES = ("pending", "approved", "rejected")


class AllocationList(GenericAPIView):
    serializer_class = AllocationSerializer

    @extend_schema(
        parameters=[OpenApiParameter("project", str)],
        responses={200: AllocationSerializer(many=True)},
        description="The allocations of your projects (every project's for finance and "
        "platform admins): dates, state, and per resource granted, used and remaining hours.",
    )
    def get(self, request: SignedInApiRequest) -> Response:
        found = selectors.allocations_visible_to(request.user)
        project = request.query_params.get("project")
        if project is not None:
            found = found.filter(project__slug=project)
        page = self.paginate_queryset(found)
        rows = [selectors.allocation_report(a) for a in page or []]
        return self.get_paginated_response(AllocationSerializer(rows, many=True).data)

    @extend_schema(
        request=inline_serializer(
            "AllocationGrant",
            {
                "project": serializers.CharField(),
                "name": serializers.CharField(),
                "starts": serializers.DateField(),
                "ends": serializers.DateField(help_text="the last day it covers"),
                "gpu_hours": serializers.IntegerField(required=False, allow_null=True),
                "core_hours": serializers.IntegerField(required=False, allow_null=True),
                "reason": serializers.CharField(),
            },
        ),
        responses={201: AllocationSerializer},
        description="A platform admin grants a project an allocation (a resource left out is "
        "not limited by it); the reason is kept in the configuration history.",
    )
    def post(self, request: SignedInApiRequest) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        made = services.allocation_grant(
            by=request.user,
            project=data.get("project"),
            name=data.get("name"),
            starts=data.get("starts"),
            ends=data.get("ends"),
            gpu_hours=data.get("gpu_hours"),
            core_hours=data.get("core_hours"),
            reason=data.get("reason"),
        )
        report = selectors.allocation_report(made)
        return Response(AllocationSerializer(report).data, status=status.HTTP_201_CREATED)


class AllocationDetail(APIView):
    @extend_schema(responses={200: AllocationSerializer})
    def get(self, request: SignedInApiRequest, pk: int) -> Response:
        found = selectors.allocation_get_for_user(request.user, pk)
        return Response(AllocationSerializer(selectors.allocation_report(found)).data)


class AllocationRequestList(ListAPIView):
    serializer_class = AllocationRequestSerializer

    def get_queryset(self):
        user = self.request.user
        inbox = self.request.query_params.get("inbox") in ("1", "true")
        found = selectors.inbox_for(user) if inbox else selectors.requests_visible_to(user)
        state = self.request.query_params.get("state")
        if state is not None:
            if state not in STATES:
                raise ApplicationError(
                    "must be pending, approved or rejected", field="state", got=state[:80]
                )
            found = found.filter(state=state)
        return found

    @extend_schema(
        parameters=[
            OpenApiParameter("inbox", bool, description="only the requests you may decide"),
            OpenApiParameter("state", str),
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=inline_serializer(
            "AllocationRequestCreate",
            {
                "project": serializers.CharField(),
                "gpu_hours": serializers.IntegerField(required=False, help_text="more of them"),
                "core_hours": serializers.IntegerField(required=False, help_text="more of them"),
                "ends": serializers.DateField(required=False, help_text="a later last day"),
                "justification": serializers.CharField(),
            },
        ),
        responses={201: AllocationRequestSerializer},
        description="A project lead asks for more allocation (or, with none current, a new "
        "one until `ends`). A platform admin decides.",
    )
    def post(self, request: SignedInApiRequest, *args, **kwargs) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        project = data.get("project")
        if not isinstance(project, str) or not project:
            raise ApplicationError("a project's slug", field="project", got=project)
        made = services.allocation_request_create(
            user=request.user,
            project=project,
            gpu_hours=data.get("gpu_hours", 0),
            core_hours=data.get("core_hours", 0),
            ends=data.get("ends"),
            justification=data.get("justification") or "",
        )
        return Response(AllocationRequestSerializer(made).data, status=status.HTTP_201_CREATED)


class AllocationRequestDecide(APIView):
    approve = True

    @extend_schema(
        request=inline_serializer(
            "AllocationDecision", {"comment": serializers.CharField(required=False)}
        ),
        responses={200: AllocationRequestSerializer},
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        found = selectors.request_get_for_user(request.user, pk)
        data = request.data if isinstance(request.data, dict) else {}
        comment = data.get("comment") or ""
        if not isinstance(comment, str):
            raise ApplicationError("text", field="comment", got=str(comment)[:80])
        decided = services.allocation_request_decide(
            user=request.user, request=found, approve=self.approve, comment=comment
        )
        return Response(AllocationRequestSerializer(decided).data)
