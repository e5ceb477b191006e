"""REST API v1 for the console's roles: queues (queue admins), nodes, project members and quotas.

Thin, like scheduling/api/tasks.py. What a user may not act on does not exist for them (404); what
they may see but not change is a 403 with the reason.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import roles
from portal.errors import ApplicationError
from portal.http import SignedInApiRequest
from portal.models import Project
from scheduling import services
from scheduling.api import policy as api_policy
from scheduling.models import Canary, Node, Pool, Queue
from scheduling.selectors.canary import canary_results
from scheduling.services.canary import canary_end, canary_start
from scheduling.services.queues import EDITABLE, queue_form_data, queue_update
from scheduling.services.quotas import member_add, member_remove, quota_delete, quota_set


class QueueSerializer(serializers.ModelSerializer):
    pool: serializers.SlugRelatedField[Pool] = serializers.SlugRelatedField(
        slug_field="name", read_only=True
    )
    admins: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", many=True, read_only=True
    )
    editable = serializers.SerializerMethodField()

    class Meta:
        model = Queue
        fields = ["name", "pool", "admins", "editable", *EDITABLE]

    def get_editable(self, queue: Queue) -> bool:
        return roles.administers_queue(self.context["request"].user, queue.pk)


def _data(request: Request) -> dict:
    if not isinstance(request.data, dict):
        raise ApplicationError("send a JSON object", field=None)
    return request.data


class QueueList(APIView):
    @extend_schema(responses={200: QueueSerializer(many=True)})
    def get(self, request: Request) -> Response:
        queues = Queue.objects.select_related("pool").prefetch_related("admins")
        return Response(QueueSerializer(queues, many=True, context={"request": request}).data)


class QueueDetail(APIView):
    def _queue(self, request: Request, name: str) -> Queue:
        queue = Queue.objects.select_related("pool").filter(name=name).first()
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
        changes = dict(_data(request))
        reason = changes.pop("reason", "")
        if not isinstance(reason, str):
            raise ApplicationError("must be text", field="reason", got=reason)
        saved = queue_update(
            user=request.user, queue=queue, data=queue_form_data(queue, changes), reason=reason
        )
        return Response(QueueSerializer(saved, context={"request": request}).data)


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
        node = Node.objects.select_related("pool").filter(name=name).first()
        if node is None or not roles.administers_pool(request.user, node.pool_id):
            raise ApplicationError("not found", status=404)
        if state not in Node.State.values:
            raise ApplicationError("must be up, drained or down", field="state", got=state[:20])
        reason = _data(request).get("reason") if request.data else None
        changed = services.nodes_set_state(
            nodes=[node],
            state=state,
            reason=str(reason or f"set {state} through the API"),
            by=request.user.get_username(),
            user=request.user,
        )
        return Response({"node": node.name, "state": state, "changed": bool(changed)})


def _project(request: SignedInApiRequest, slug: str) -> Project:
    project = Project.objects.filter(slug=slug).first()
    if project is None or not (
        roles.is_platform_admin(request.user)
        or project.memberships.filter(user=request.user).exists()
    ):
        raise ApplicationError("not found", status=404)
    return project


_MEMBER = inline_serializer(
    "Member", {"username": serializers.CharField(), "role": serializers.CharField()}
)


class ProjectMembers(APIView):
    @extend_schema(responses={200: _MEMBER})
    def get(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        rows = project.memberships.select_related("user").order_by("user__username")
        return Response([{"username": m.user.username, "role": m.role} for m in rows])

    @extend_schema(
        request=inline_serializer("MemberAdd", {"username": serializers.CharField()}),
        responses={201: _MEMBER},
        description="The project's lead (or a platform admin) adds an existing account.",
    )
    def post(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        username = _data(request).get("username")
        if not isinstance(username, str) or not username:
            raise ApplicationError("required: a username", field="username", got=username)
        made = member_add(by=request.user, project=project, username=username)
        return Response({"username": username, "role": made.role}, status=201)


class ProjectMember(APIView):
    @extend_schema(responses={204: None})
    def delete(self, request: SignedInApiRequest, slug: str, username: str) -> Response:
        member_remove(by=request.user, project=_project(request, slug), username=username)
        return Response(status=204)


class ProjectQuotas(api_policy.ProjectQuotas):
    """Read the project's quotas with their use; set or remove one: a platform admin any,
    the project's lead a member's share within the project's."""

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
                "reason": serializers.CharField(required=False),
            },
        ),
        responses={200: None},
    )
    def put(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        data = _data(request)
        quota = quota_set(
            project=project.slug,
            queue=_text(data, "queue"),
            resource=_text(data, "resource"),
            limit=data.get("limit"),
            user=data.get("user") or None,
            over_quota=data.get("over_quota") or "queue",
            period=data.get("period") or "month",
            by=request.user,
            reason=_text(data, "reason", required=False),
        )
        return Response({"quota": str(quota), "limit": quota.limit})

    @extend_schema(responses={204: None})
    def delete(self, request: SignedInApiRequest, slug: str) -> Response:
        project = _project(request, slug)
        data = _data(request)
        gone = quota_delete(
            project=project.slug,
            queue=_text(data, "queue"),
            resource=_text(data, "resource"),
            user=data.get("user") or None,
            by=request.user,
            reason=_text(data, "reason", required=False),
        )
        if not gone:
            raise ApplicationError("no such quota", status=404)
        return Response(status=204)


def _text(data: dict, name: str, *, required: bool = True) -> str:
    value = data.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ApplicationError("required: text", field=name, got=value)
    return value


def _canary_data(canary: Canary) -> dict:
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
        return Response([_canary_data(c) for c in Canary.objects.all()[:20]])

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
        data = _data(request)
        made = canary_start(
            user=request.user,
            name=data.get("name"),
            share_percent=data.get("share_percent"),
            rule_set={
                "routing_rules": data.get("routing_rules"),
                "level_rules": data.get("level_rules", []),
            },
            reason=_text(data, "reason", required=False),
        )
        return Response(_canary_data(made), status=201)


class CanaryDecide(APIView):
    promote = True

    @extend_schema(
        request=inline_serializer("CanaryEnd", {"reason": serializers.CharField(required=False)}),
        responses={200: None},
    )
    def post(self, request: SignedInApiRequest, pk: int) -> Response:
        canary = Canary.objects.filter(pk=pk).first()
        if canary is None or not roles.is_platform_admin(request.user):
            raise ApplicationError("not found", status=404)
        data = _data(request) if request.data else {}
        ended = canary_end(
            user=request.user,
            canary=canary,
            promote=self.promote,
            reason=_text(data, "reason", required=False),
        )
        return Response(_canary_data(ended))
