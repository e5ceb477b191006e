"""REST API v1 for queues: every queue, and a queue admin's changes to theirs.

Thin, like scheduling/api/tasks.py. What a user may see but not change is a 403 with the reason.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import json_object
from scheduling.selectors.queues import queue_by_name, queue_list
from scheduling.serializers import QueueSerializer
from scheduling.services.queues import EDITABLE, queue_form_data, queue_update


class QueueList(APIView):
    @extend_schema(responses={200: QueueSerializer(many=True)})
    def get(self, request: Request) -> Response:
        queues = queue_list()
        return Response(QueueSerializer(queues, many=True, context={"request": request}).data)


class QueueDetail(APIView):
    def _queue(self, request: Request, name: str):
        queue = queue_by_name(name)
        if queue is None:
            raise ApplicationError("not found", status=404)
        return queue

    @extend_schema(responses={200: QueueSerializer})
    def get(self, request: Request, name: str) -> Response:
        queue = self._queue(request, name)
        return Response(QueueSerializer(queue, context={"request": request}).data)

    @extend_schema(
        request=inline_serializer(
            "QueueChange",
            {"reason": serializers.CharField(), **{f: serializers.JSONField() for f in EDITABLE}},
        ),
        responses={200: QueueSerializer},
        description="Change a queue you administer: any of its editable fields, and `reason`.",
    )
    def patch(self, request: SignedInApiRequest, name: str) -> Response:
        queue = self._queue(request, name)
        if not roles.administers_queue(request.user, queue.pk):
            raise ApplicationError("only this queue's admins or a platform admin", status=403)
        changes = dict(json_object(request))
        reason = changes.pop("reason", "")
        if not isinstance(reason, str):
            raise ApplicationError("must be text", field="reason", got=reason)
        saved = queue_update(
            user=request.user, queue=queue, data=queue_form_data(queue, changes), reason=reason
        )
        return Response(QueueSerializer(saved, context={"request": request}).data)
