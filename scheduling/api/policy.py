"""REST API v1 for the policy: a project's quotas, and priority-raise requests.

Thin, like scheduling/api/tasks.py: read the request, call one service or selector, answer.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import cast

from django.contrib.auth.models import User
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListCreateAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.models import Project
from portal.selectors import project_get_for_user
from scheduling import services
from scheduling.descriptor import parse_duration
from scheduling.selectors import task_get_for_user
from scheduling.selectors.quota import project_quotas
from scheduling.selectors.requests import inbox_for, request_get_for_user, requests_visible_to
from scheduling.serializers import PriorityRequestSerializer

_QUOTAS = inline_serializer(
    "QuotaUse",
    many=True,
    fields={
        "queue": serializers.CharField(),
        "user": serializers.CharField(allow_null=True),
        "resource": serializers.ChoiceField(["gpus", "cpus", "tasks", "gpu_hours", "core_hours"]),
        "limit": serializers.IntegerField(),
        "used": serializers.FloatField(help_text="hours for a budget"),
        "over_quota": serializers.ChoiceField(["queue", "reject"]),
        "period": serializers.CharField(allow_null=True, help_text="a budget's period"),
        "text": serializers.CharField(),
    },
)


class ProjectQuotas(APIView):
    @extend_schema(responses={200: _QUOTAS})
    def get(self, request: SignedInApiRequest, slug: str) -> Response:
        project = project_get_for_user(request.user, slug)
        if project is None and request.user.is_superuser:
            project = Project.objects.filter(slug=slug).first()
        if project is None:
            raise ApplicationError("not found", status=404)
        return Response(project_quotas(project))


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
            project=_text(data, "project"),
            queue=_text(data, "queue"),
            level=_text(data, "level") or "",
            reason=_text(data, "reason") or "",
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
            comment=_text(data, "comment") or "",
        )
        return Response(PriorityRequestSerializer(decided).data)


def _text(data: dict, name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApplicationError("must be text", field=name, got=value)
    return value


def parse_until(raw: object) -> datetime:
    """An ISO 8601 time (UTC if it names no zone), or a duration from now (`4h`, `2d`)."""
    if not isinstance(raw, str) or not raw.strip():
        raise ApplicationError("required: a time (ISO 8601) or a duration (4h)", field="until")
    try:
        return timezone.now() + timedelta(seconds=parse_duration(raw.strip()))
    except ValueError:
        pass  # not a duration: a time, then
    when = None
    with contextlib.suppress(ValueError):  # a well-formed but impossible time: refused below
        when = parse_datetime(raw.strip())
    if when is None:
        raise ApplicationError(
            "must be a time (2026-12-03T18:00Z) or a duration (4h)", field="until", got=raw[:80]
        )
    return when if when.tzinfo else when.replace(tzinfo=UTC)
