"""REST API v1 for canaries: new routing and level rules tried on a share of submissions,
then promoted or abandoned (platform admins; for anyone else they do not exist).
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.parsing import json_object, text
from scheduling.selectors.canary import canary_get, canary_list, canary_results
from scheduling.services.canary import canary_end, canary_start


def _canary_data(canary) -> dict:
    return {
        "id": canary.pk,
        "name": canary.name,
        "share_percent": canary.share_percent,
        "state": canary.state,
        "started_at": canary.started_at,
        "ended_at": canary.ended_at,
        "reason": canary.reason,
        "routing_rules": canary.routing_rules,
        "level_rules": canary.level_rules,
        "results": canary_results(canary),
    }


class CanaryList(APIView):
    """Canaries, newest first, each with its results beside the current rules' (platform
    admins); POST starts one."""

    def _admin(self, request: SignedInApiRequest) -> None:
        if not roles.is_platform_admin(request.user):
            raise ApplicationError("not found", status=404)

    @extend_schema(responses={200: None})
    def get(self, request: SignedInApiRequest) -> Response:
        self._admin(request)
        return Response([_canary_data(c) for c in canary_list(20)])

    @extend_schema(
        request=inline_serializer(
            "CanaryStart",
            {
                "name": serializers.CharField(),
                "share_percent": serializers.IntegerField(),
                "routing_rules": serializers.ListField(child=serializers.DictField()),
                "level_rules": serializers.ListField(child=serializers.DictField()),
                "reason": serializers.CharField(required=False),
            },
        ),
        responses={201: None},
    )
    def post(self, request: SignedInApiRequest) -> Response:
        self._admin(request)
        data = json_object(request)
        made = canary_start(
            user=request.user,
            name=data.get("name"),
            share_percent=data.get("share_percent"),
            rule_set={
                "routing_rules": data.get("routing_rules"),
                "level_rules": data.get("level_rules", []),
            },
            reason=text(data, "reason", required=False),
        )
        return Response(_canary_data(made), status=201)


class CanaryDecide(APIView):
    promote = True

    @extend_schema(
        request=inline_serializer("CanaryEnd", {"reason": serializers.CharField(required=False)}),
        responses={200: None},
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        canary = canary_get(pk)
        if canary is None or not roles.is_platform_admin(request.user):
            raise ApplicationError("not found", status=404)
        data = json_object(request) if request.data else {}
        ended = canary_end(
            user=request.user,
            canary=canary,
            promote=self.promote,
            reason=text(data, "reason", required=False),
        )
        return Response(_canary_data(ended))
