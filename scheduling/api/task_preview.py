"""`POST /api/v1/tasks/preview/`: what `POST /api/v1/tasks/` would do with the same body,
storing nothing (docs/api.md). Thin: the submit's own reading of the request, then the
submit page's preview service (`submit_preview`), which runs the submission's checks."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from portal.http import SignedInApiRequest
from portal.parsing import DESCRIPTOR_PARSERS, descriptor_request, read_descriptor
from scheduling import services
from scheduling.services.preview import Preview, TaskPreview


class PreviewError(serializers.Serializer):
    field = serializers.CharField(allow_null=True)
    message = serializers.CharField()
    got = serializers.JSONField(allow_null=True)


class PreviewOtherType(serializers.Serializer):
    type = serializers.CharField()
    advice = serializers.CharField(help_text="what to write in the descriptor to get it")


class PreviewQuota(serializers.Serializer):
    text = serializers.CharField()
    project = serializers.CharField()
    user = serializers.CharField(allow_null=True, help_text="null: the whole project's quota")
    queue = serializers.CharField()
    resource = serializers.CharField(help_text="gpus, cpus, tasks, gpu_hours or core_hours")
    limit = serializers.IntegerField()
    used = serializers.FloatField()
    left = serializers.FloatField(help_text="the room left now")
    period = serializers.CharField(allow_null=True, help_text="a budget's period")


class PreviewStart(serializers.Serializer):
    at_once = serializers.BooleanField(help_text="the pool has room for it now")
    by = serializers.DateTimeField(
        allow_null=True, help_text="could start by then at the latest (null: no estimate)"
    )
    position = serializers.IntegerField(help_text="1: next among the queue's waiting tasks")
    waiting = serializers.IntegerField(help_text="the queue's tasks waiting to start")


class TaskPreviewSerializer(serializers.Serializer):
    accepted = serializers.BooleanField(help_text="the submit would store it as shown")
    name = serializers.CharField(allow_null=True)
    type = serializers.CharField(allow_null=True)
    type_declared = serializers.BooleanField(allow_null=True)
    classify_reason = serializers.CharField(help_text="the rule that declared or guessed it")
    other_types = PreviewOtherType(many=True, help_text="a guessed type: the others that would fit")
    queue = serializers.CharField(allow_null=True, help_text="null: no queue takes it")
    routing_reason = serializers.CharField()
    quotas = PreviewQuota(many=True, help_text="each quota it counts against, with its room now")
    admission = serializers.CharField(allow_null=True, help_text="what admission would do now")
    held = serializers.BooleanField(allow_null=True, help_text="its quota would hold it")
    start = PreviewStart(allow_null=True, help_text="null: refused, or held for its quota")
    canary = serializers.CharField(help_text="an active canary may route it by its own rules")
    # The submit's own key for its errors; DRF's metaclass takes declared fields off the class,
    # so the name does not hide `Serializer.errors` (mypy cannot know that).
    errors = PreviewError(many=True, help_text="where the submit would refuse: its errors")  # type: ignore[assignment]


class TaskPreviewView(APIView):
    # The submit's own parsers, authentication and permission (signed in), as
    # `TaskListCreate`'s are (a test holds the two alike). Unlike a submit, a preview replays
    # its queue's waiting tasks for its start estimate (some 47 ms at 500 waiting, against a
    # submit's 4 ms), so each user's previews are counted (`SWITCHYARD_PREVIEW_RATE`).
    parser_classes = DESCRIPTOR_PARSERS
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "preview"

    @extend_schema(
        request=descriptor_request("DescriptorPreview"),
        responses={code: TaskPreviewSerializer for code in (200, 400, 409)},
        description="What submitting this task descriptor to `POST /api/v1/tasks/` would do "
        "now, storing nothing: its type (declared, or guessed and by which rule), its queue "
        "and why, the quotas it counts against with their room, and when it could start. "
        "Where the submit would refuse: the same status (400, or 409 for a quota that "
        "refuses) and the same `errors`, beside what the preview could tell.",
    )
    def post(self, request: SignedInApiRequest) -> Response:
        body, fmt = read_descriptor(request)
        preview = services.submit_preview(user=request.user, text=body, fmt=fmt, task_only=True)
        return Response(preview_data(preview), status=preview.status)


def preview_data(preview: Preview) -> dict[str, Any]:
    """The preview of one task as the API answers it; a descriptor that did not parse has no
    type or queue, only its errors."""
    task = preview.tasks[0] if preview.tasks else None
    errors = [*preview.errors, *(task.errors if task else ())]
    data: dict[str, Any] = {
        "accepted": preview.accepted,
        "name": None,
        "type": None,
        "type_declared": None,
        "classify_reason": "",
        "other_types": [],
        "queue": None,
        "routing_reason": "",
        "quotas": [],
        "admission": None,
        "held": None,
        "start": None,
        "canary": preview.canary,
        "errors": [e.as_dict() for e in errors],
    }
    if task is not None:
        data.update(_task_data(task))
    return TaskPreviewSerializer(data).data


def _task_data(task: TaskPreview) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": task.name,
        "type": task.type,
        "type_declared": task.declared,
        "classify_reason": task.classify_reason,
        "other_types": [{"type": t, "advice": advice} for t, advice in task.others],
        "queue": task.queue,
        "routing_reason": task.routing_reason,
    }
    seen = task.outlook
    if seen is None:
        return data
    data["quotas"] = [
        {
            "text": room.text,
            "project": room.project,
            "user": room.user,
            "queue": room.queue,
            "resource": room.resource,
            "limit": room.limit,
            "used": room.used,
            "left": room.left,
            "period": room.period,
        }
        for room in seen.quotas
    ]
    data["admission"], data["held"] = seen.admission, seen.held
    if not seen.held:
        data["start"] = {
            "at_once": seen.at_once,
            "by": seen.start,
            "position": seen.position,
            "waiting": seen.waiting,
        }
    return data
