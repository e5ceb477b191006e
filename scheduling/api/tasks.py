"""REST API v1 for tasks. Thin: read the request, call one service or selector, answer."""

from __future__ import annotations

import re
from typing import cast

from django.contrib.auth.models import User
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.generics import ListCreateAPIView, RetrieveAPIView
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import (
    DESCRIPTOR_PARSERS,
    JSON_PARSERS,
    JSON_TYPES,
    descriptor_request,
    media_type,
    raw_body,
    read_descriptor,
)
from scheduling import services
from scheduling.decisions import lifecycle
from scheduling.descriptor import DESCRIPTOR_JSON_SCHEMA, slug_problem
from scheduling.selectors import (
    site_view,
    task_get_for_user,
    task_list_for_user,
)
from scheduling.selectors.logs import log_raw_length, task_log
from scheduling.serializers import (
    TaskDetailSerializer,
    TaskSerializer,
    task_created_data,
)
from scheduling.spec import TASK_TYPES

# Offsets and ids are exact in every JSON client and fit a PostgreSQL bigint.
_MAX_INT = 2**53 - 1
_INTEGER = re.compile(r"-?[0-9]{1,20}")


_FILTERS = {
    "workflow": ("workflow_id", None),
    "state": ("state", set(lifecycle.TASK_STATES)),
    "project": ("project__slug", None),
    "queue": ("queue__name", None),
    "type": ("type", set(TASK_TYPES)),
}


class TaskListCreate(ListCreateAPIView):
    serializer_class = TaskSerializer
    # JSON and YAML bodies are read raw and parsed by the descriptor module, with its limits.
    parser_classes = DESCRIPTOR_PARSERS

    def get_queryset(self):
        queryset = task_list_for_user(self.request.user)
        for param, (lookup, allowed) in _FILTERS.items():
            value = self.request.query_params.get(param)
            if value is None:
                continue
            if param == "workflow" and not _is_id(value):
                raise ApplicationError(
                    f"must be a workflow id (1 to {_MAX_INT})", field=param, got=value[:80]
                )
            if param in ("project", "queue") and slug_problem(value) is not None:
                raise ApplicationError(slug_problem(value), field=param, got=value[:80])
            if allowed is not None and value not in allowed:
                raise ApplicationError(
                    f"must be one of {', '.join(sorted(allowed))}", field=param, got=value[:80]
                )
            queryset = queryset.filter(**{lookup: value})
        return queryset.order_by("-id")

    @extend_schema(
        parameters=[
            OpenApiParameter(name, str, description=f"filter by {name}") for name in _FILTERS
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=descriptor_request("DescriptorUpload"),
        responses={201: TaskSerializer},
        description="Submit one task descriptor (see /api/v1/descriptor-schema/).",
    )
    def post(self, request: Request, *args, **kwargs) -> Response:
        body, fmt = read_descriptor(request)
        # The default permission, IsAuthenticated, lets only a signed-in user in.
        user = cast(User, request.user)
        task = services.task_submit(user=user, text=body, fmt=fmt)
        # The summary, not the detail: a task just stored has one event and no attempt, and
        # building the detail was half the cost of accepting a task (docs/benchmarks.md).
        queue = {pk: name for name, pk in site_view().queue_ids.items()}[task.queue_id]
        url = request.build_absolute_uri(reverse("api-task-detail", args=[task.pk]))
        data = task_created_data(task, queue=queue, url=url)
        return Response(data, status=status.HTTP_201_CREATED)


class TaskBatch(APIView):
    parser_classes = JSON_PARSERS
    body_limit, body_what = "SWITCHYARD_BATCH_MAX_BYTES", "batch"

    @extend_schema(
        request={"application/json": OpenApiTypes.OBJECT},
        responses={
            201: inline_serializer(
                "TaskBatchCreated",
                {"count": serializers.IntegerField(), "ids": serializers.ListField()},
            )
        },
        description='Many independent tasks in one request: `{"tasks": [descriptor, ...]}`. '
        "All are stored or none; errors name `tasks[i].field`.",
    )
    def post(self, request: SignedInApiRequest) -> Response:
        content_type = media_type(request)
        if content_type not in JSON_TYPES:
            raise ApplicationError(
                "send the batch as application/json", got=content_type or None, status=415
            )
        ids = services.task_submit_batch(user=request.user, text=raw_body(request))
        return Response({"count": len(ids), "ids": ids}, status=status.HTTP_201_CREATED)


class TaskDetail(RetrieveAPIView):
    serializer_class = TaskDetailSerializer

    def get_object(self):
        return task_get_for_user(self.request.user, self.kwargs["pk"])


class TaskCancel(APIView):
    @extend_schema(
        request=None,
        responses={200: TaskSerializer, 202: TaskSerializer},
        description="200: the task is cancelled. 202: its backend job is being cancelled by "
        "a worker (`cancelling` is true until then). 409: it had already ended.",
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        task = task_get_for_user(request.user, pk, change=True)
        task = services.task_cancel(user=request.user, task=task)
        data = TaskSerializer(task, context={"request": request}).data
        return Response(data, status=202 if task.cancelling else 200)


class TaskLog(APIView):
    @extend_schema(
        parameters=[OpenApiParameter("offset", int), OpenApiParameter("limit", int)],
        responses={
            200: inline_serializer(
                "TaskLog",
                {
                    "task": serializers.IntegerField(),
                    "offset": serializers.IntegerField(),
                    "log": serializers.CharField(),
                    "next_offset": serializers.IntegerField(
                        help_text="Where the next read starts, in bytes of the raw log (invalid "
                        "UTF-8 is shown as U+FFFD, so not `offset` + the text's length)."
                    ),
                },
            )
        },
    )
    def get(self, request: SignedInApiRequest, pk: int) -> Response:
        task = task_get_for_user(request.user, pk)
        offset = _int_param(request, "offset", 0, minimum=0, maximum=_MAX_INT)
        limit = _int_param(request, "limit", 1 << 20, minimum=1, maximum=8 << 20)
        text = task_log(task=task, offset=offset, limit=limit)
        return Response(
            {
                "task": task.pk,
                "offset": offset,
                "log": text,
                "next_offset": offset + log_raw_length(text),
            }
        )


def _int_param(request: Request, name: str, default: int, *, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _INTEGER.fullmatch(raw):
        raise ApplicationError("must be an integer", field=name, got=raw[:80])
    value = int(raw)
    if value < minimum or value > maximum:
        raise ApplicationError(f"must be between {minimum} and {maximum}", field=name, got=raw)
    return value


def _is_id(value: str) -> bool:
    return value.isascii() and value.isdigit() and len(value) <= 16 and 0 < int(value) <= _MAX_INT


@extend_schema(responses={200: OpenApiTypes.OBJECT})
@api_view(["GET"])
@permission_classes([AllowAny])
def descriptor_schema(request: Request) -> Response:
    return Response(DESCRIPTOR_JSON_SCHEMA)
