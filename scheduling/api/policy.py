"""REST API v1 for priority-raise requests: ask for a higher level, decide.

Thin, like scheduling/api/tasks.py: read the request, call one service or selector, answer.
"""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListCreateAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import parse_until, text_or_none
from scheduling import services
from scheduling.selectors import task_get_for_user
from scheduling.selectors.requests import inbox_for, request_get_for_user, requests_visible_to
from scheduling.serializers import PriorityRequestSerializer


class PriorityRequestList(ListCreateAPIView):
    serializer_class = PriorityRequestSerializer

    def get_queryset(self):
        found = (
            inbox_for(self.request.user)
            if self.request.query_params.get("inbox") in ("1", "true")
            else requests_visible_to(self.request.user).order_by("-id")
        )
        state = self.request.query_params.get("state")
        if state is not None:
            if state not in ("pending", "approved", "rejected", "expired"):
                raise ApplicationError(
                    "must be pending, approved, rejected or expired", field="state", got=state[:80]
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
            "PriorityRequestCreate",
            {
                "task": serializers.IntegerField(required=False),
                "project": serializers.CharField(required=False),
                "queue": serializers.CharField(required=False),
                "level": serializers.ChoiceField(["medium", "high"]),
                "reason": serializers.CharField(),
                "until": serializers.CharField(help_text="ISO 8601 time, or a duration: 4h"),
            },
        ),
        responses={201: PriorityRequestSerializer},
        description="Ask for a higher level for a task, or for a project's tasks in a queue, "
        "until a time. A queue admin of that queue, or a platform admin, decides.",
    )
    def post(self, request: Request, *args, **kwargs) -> Response:
        # The default permission, IsAuthenticated, lets only a signed-in user in.
        user = cast(User, request.user)
        data = request.data if isinstance(request.data, dict) else {}
        task = None
        if data.get("task") is not None:
            task = task_get_for_user(user, data["task"], change=True)
        made = services.priority_request_create(
            user=user,
            task=task,
            project=text_or_none(data, "project"),
            queue=text_or_none(data, "queue"),
            level=text_or_none(data, "level") or "",
            reason=text_or_none(data, "reason") or "",
            until=parse_until(data.get("until")),
        )
        return Response(PriorityRequestSerializer(made).data, status=status.HTTP_201_CREATED)


class PriorityRequestDecide(APIView):
    approve = True

    @extend_schema(
        request=inline_serializer("Decision", {"comment": serializers.CharField(required=False)}),
        responses={200: PriorityRequestSerializer},
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        found = request_get_for_user(request.user, pk)
        data = request.data if isinstance(request.data, dict) else {}
        decided = services.priority_request_decide(
            user=request.user,
            request=found,
            approve=self.approve,
            comment=text_or_none(data, "comment") or "",
        )
        return Response(PriorityRequestSerializer(decided).data)
