"""REST API v1 for a project's quotas: read them with their use; set or remove one.

Thin, like scheduling/api/tasks.py. A project a user may not see does not exist for them (404);
a quota they may see but not change is a 403 with the reason.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import json_object, text
from portal.selectors import project_get_visible
from scheduling.selectors.quota import project_quotas
from scheduling.services.quotas import UNCHANGED, quota_delete, quota_set

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
        "borrowing_limit": serializers.IntegerField(
            help_text="how far over its limit it may go on other projects' unused quota"
        ),
        "lending_limit": serializers.IntegerField(
            allow_null=True, help_text="how much of its unused quota it lends; null: all"
        ),
        "borrowed": serializers.FloatField(help_text="what it holds over its limit now"),
        "on_borrowed_room": inline_serializer(
            "OnBorrowedRoom",
            fields={"running": serializers.IntegerField(), "waiting": serializers.IntegerField()},
        ),
        "text": serializers.CharField(),
    },
)


def _project(request: SignedInApiRequest, slug: str):
    project = project_get_visible(request.user, slug)
    if project is None:
        raise ApplicationError("not found", status=404)
    return project


class ProjectQuotas(APIView):
    """Read the project's quotas with their use; set or remove one: a platform admin any,
    the project's lead a member's share within the project's."""

    @extend_schema(responses={200: _QUOTAS})
    def get(self, request: SignedInApiRequest, slug: str) -> Response:
        return Response(project_quotas(_project(request, slug)))

    @extend_schema(
        request=inline_serializer(
            "QuotaChange",
            {
                "queue": serializers.CharField(),
                "resource": serializers.CharField(),
                "limit": serializers.IntegerField(),
                "user": serializers.CharField(required=False),
                "over_quota": serializers.CharField(required=False),
                "period": serializers.CharField(required=False),
                "borrowing_limit": serializers.IntegerField(required=False),
                "lending_limit": serializers.IntegerField(required=False, allow_null=True),
                "reason": serializers.CharField(required=False),
            },
        ),
        responses={200: None},
    )
    def put(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        data = json_object(request)
        quota = quota_set(
            project=project.slug,
            queue=text(data, "queue"),
            resource=text(data, "resource"),
            limit=data.get("limit"),
            user=data.get("user") or None,
            over_quota=data.get("over_quota") or "queue",
            period=data.get("period") or "month",
            borrowing_limit=data.get("borrowing_limit", UNCHANGED),
            lending_limit=data.get("lending_limit", UNCHANGED),
            by=request.user,
            reason=text(data, "reason", required=False),
        )
        return Response(
            {
                "quota": str(quota),
                "limit": quota.limit,
                "borrowing_limit": quota.borrowing_limit,
                "lending_limit": quota.lending_limit,
            }
        )

    @extend_schema(responses={204: None})
    def delete(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        data = json_object(request)
        gone = quota_delete(
            project=project.slug,
            queue=text(data, "queue"),
            resource=text(data, "resource"),
            user=data.get("user") or None,
            by=request.user,
            reason=text(data, "reason", required=False),
        )
        if not gone:
            raise ApplicationError("no such quota", status=404)
        return Response(status=204)
