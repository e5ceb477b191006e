"""REST API v1 of the portal itself: the audit log, the configuration history, and the
members of a project.

What a user may not act on does not exist for them (404); what they may see but not change is a
403 with the reason.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import checked_pk, json_object
from portal.selectors import (
    audit_actions,
    audit_filter,
    audit_visible_to,
    config_models,
    config_version_get_visible,
    config_versions_visible,
    project_get_visible,
    project_memberships,
)
from portal.serializers import AuditEventSerializer, ConfigVersionSerializer
from portal.services import (
    config_version_restore,
    config_version_undo,
    member_add,
    member_remove,
)


class AuditList(ListAPIView):
    """The audit rows you may read, newest first (platform admins: all)."""

    serializer_class = AuditEventSerializer

    def get_queryset(self):
        return audit_filter(audit_visible_to(self.request.user), self.request.query_params)

    @extend_schema(
        parameters=[
            OpenApiParameter("action", str, enum=[value for value, _ in audit_actions()]),
            OpenApiParameter("actor", str),
            OpenApiParameter("project", str),
            OpenApiParameter("since", str, description="a date or an ISO 8601 time"),
        ]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


def _versions(request: SignedInApiRequest):
    found = config_versions_visible(request.user)
    if found is None:
        raise ApplicationError("not found", status=404)
    return found


class ConfigVersionList(ListAPIView):
    """Configuration versions, newest first: platform admins all, queue admins their queues'."""

    serializer_class = ConfigVersionSerializer

    def get_queryset(self):
        found = _versions(self.request)
        model = self.request.query_params.get("model")
        if model:
            if model not in config_models():
                raise ApplicationError(
                    f"must be one of {', '.join(config_models())}",
                    field="model",
                    got=model[:80],
                )
            found = found.filter(model=model)
        object_id = self.request.query_params.get("object_id")
        if object_id:
            try:
                found = found.filter(object_id=checked_pk(object_id))
            except ValueError:
                raise ApplicationError(
                    "must be an id", field="object_id", got=object_id[:40]
                ) from None
        return found

    @extend_schema(parameters=[OpenApiParameter("model", str), OpenApiParameter("object_id", int)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


def _version_and_reason(request: SignedInApiRequest, pk: int, verb: str):
    _versions(request)  # the history is no page of theirs: 404
    try:
        version = config_version_get_visible(request.user, checked_pk(pk))
    except ValueError:
        version = None
    if version is None:
        raise ApplicationError("not found", status=404)
    data = request.data if isinstance(request.data, dict) else {}
    reason = data.get("reason")
    if not isinstance(reason, str):
        raise ApplicationError(f"required: why you {verb}", field="reason", got=reason)
    return version, reason


class ConfigRollback(APIView):
    @extend_schema(
        request=inline_serializer("Rollback", {"reason": serializers.CharField()}),
        responses={201: ConfigVersionSerializer},
        description="Make the object what it was right after this version (platform admins). "
        "The answer is the new version the rollback wrote.",
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        version, reason = _version_and_reason(request, pk, "roll back")
        made = config_version_restore(user=request.user, version=version, reason=reason)
        return Response(ConfigVersionSerializer(made).data, status=201)


class ConfigUndo(APIView):
    @extend_schema(
        request=inline_serializer("Undo", {"reason": serializers.CharField()}),
        responses={201: ConfigVersionSerializer},
        description="Undo this change (platform admins): the object goes back to its version "
        "before it, or is deleted if this change created it. The answer is the new version "
        "the undo wrote; 409 says why a change cannot be undone.",
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        version, reason = _version_and_reason(request, pk, "undo it")
        made = config_version_undo(user=request.user, version=version, reason=reason)
        return Response(ConfigVersionSerializer(made).data, status=201)


def _project(request: SignedInApiRequest, slug: str):
    project = project_get_visible(request.user, slug)
    if project is None:
        raise ApplicationError("not found", status=404)
    return project


_MEMBER = inline_serializer(
    "Member", {"username": serializers.CharField(), "role": serializers.CharField()}
)


class ProjectMembers(APIView):
    @extend_schema(responses={200: _MEMBER})
    def get(self, request: SignedInApiRequest, slug: str) -> Response:
        rows = project_memberships(_project(request, slug))
        return Response([{"username": m.user.username, "role": m.role} for m in rows])

    @extend_schema(
        request=inline_serializer("MemberAdd", {"username": serializers.CharField()}),
        responses={201: _MEMBER},
        description="The project's lead (or a platform admin) adds an existing account.",
    )
    def post(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        username = json_object(request).get("username")
        if not isinstance(username, str) or not username:
            raise ApplicationError("required: a username", field="username", got=username)
        made = member_add(by=request.user, project=project, username=username)
        return Response({"username": username, "role": made.role}, status=201)


class ProjectMember(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: SignedInApiRequest, slug: str, username: str) -> Response:
        member_remove(by=request.user, project=_project(request, slug), username=username)
        return Response(status=204)
