"""REST API v1 for the nightly lease schedules (platform admins; docs/capacity.md).

The Capacity page's schedules, read through the page's own form and saved by its service:
the two doors refuse alike, and each change is a configuration version with its reason
(History). To anyone but a platform admin the schedules do not exist: an empty list, a
404 for one, a 403 for a new one."""

from __future__ import annotations

import contextlib
from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import roles
from portal.errors import ApplicationError, ErrorItem
from portal.http import SignedInApiRequest
from portal.parsing import checked_pk, json_object
from scheduling.forms_admin import LeaseScheduleForm
from scheduling.selectors.capacity import lease_schedule_get, lease_schedule_list
from scheduling.serializers import LeaseScheduleSerializer
from scheduling.services.lease_schedules import lease_schedule_delete, lease_schedule_save

FIELDS = ("pool", "queue", "count", "start", "duration", "enabled")
WRITE = inline_serializer(
    "LeaseScheduleWrite",
    {
        "pool": serializers.CharField(help_text="the pool whose idle nodes are lent"),
        "queue": serializers.CharField(help_text="a queue of another pool"),
        "count": serializers.IntegerField(help_text="how many idle nodes"),
        "start": serializers.CharField(help_text="every day at, site time: 20:00"),
        "duration": serializers.CharField(help_text="how long each lease lasts: 6h, 90m"),
        "enabled": serializers.BooleanField(required=False, help_text="default true"),
        "reason": serializers.CharField(help_text="why: kept with the version in History"),
    },
)


def _schedule(request: SignedInApiRequest, pk: int):
    found = None
    if roles.is_platform_admin(request.user):
        with contextlib.suppress(ValueError):  # an id no database holds
            found = lease_schedule_get(checked_pk(pk))
    if found is None:
        raise ApplicationError("no such lease schedule", status=404)
    return found


def _reason(data: dict) -> str:
    """The request's `reason`, which must be text (the service refuses an empty one); a
    number or a list is refused rather than written into the history as its repr."""
    reason = data.get("reason", "")
    if not isinstance(reason, str):
        raise ApplicationError(
            "must be text: why you change the schedule", field="reason", got=reason
        )
    return reason


def _save(request: SignedInApiRequest, schedule):
    """Create (`schedule` None) or change a schedule from the request's JSON: the fields
    given over the schedule's own (a new one: the page's defaults), checked by the page's
    form; a field it does not know is refused."""
    data = json_object(request)
    unknown = sorted(set(data) - {*FIELDS, "reason"})
    if unknown:
        expected = ", ".join((*FIELDS, "reason"))
        raise ApplicationError(f"unknown field; expected {expected}", field=unknown[0])
    if "enabled" in data and not isinstance(data["enabled"], bool):
        # The form's checkbox would read any text but "false" as on.
        raise ApplicationError("must be true or false", field="enabled", got=data["enabled"])
    current = LeaseScheduleForm.for_schedule(schedule)
    values: dict[str, Any] = {name: current[name].initial for name in FIELDS}
    values.update((name, data[name]) for name in FIELDS if name in data)
    form = LeaseScheduleForm.for_schedule(
        schedule, {f"{current.prefix}-{name}": value for name, value in values.items()}
    )
    if not form.is_valid():
        errors = [
            ErrorItem(name, " ".join(map(str, messages)), data.get(name))
            for name, messages in form.errors.items()
        ]
        raise ApplicationError("invalid lease schedule", errors=errors)
    try:
        return lease_schedule_save(
            user=request.user,
            schedule=schedule,
            reason=_reason(data),
            **form.schedule_values(),
        )
    except ApplicationError as exc:  # the model's checks name its column: the form's field
        exc.errors = [
            ErrorItem(name, e.message, data.get(name))
            if (name := form.field_for(e.field)) not in (None, e.field)
            else e
            for e in exc.errors
        ]
        raise


class LeaseScheduleList(APIView):
    @extend_schema(
        responses={200: LeaseScheduleSerializer(many=True)},
        description="The nightly lease schedules the Capacity page keeps (platform admins; "
        "anyone else: an empty list).",
    )
    def get(self, request: SignedInApiRequest) -> Response:
        schedules = lease_schedule_list() if roles.is_platform_admin(request.user) else []
        return Response(LeaseScheduleSerializer(schedules, many=True).data)

    @extend_schema(
        request=WRITE,
        responses={201: LeaseScheduleSerializer},
        description="Add a nightly lease: every day from `start` for `duration`, lend `count` "
        "idle nodes of `pool` to `queue` (platform admins; a version with its `reason`).",
    )
    def post(self, request: SignedInApiRequest) -> Response:
        if not roles.is_platform_admin(request.user):
            raise ApplicationError("only a platform admin keeps lease schedules", status=403)
        saved = _save(request, None)
        return Response(LeaseScheduleSerializer(saved).data, status=status.HTTP_201_CREATED)


class LeaseScheduleDetail(APIView):
    @extend_schema(responses={200: LeaseScheduleSerializer})
    def get(self, request: SignedInApiRequest, pk: int) -> Response:
        return Response(LeaseScheduleSerializer(_schedule(request, pk)).data)

    @extend_schema(
        request=WRITE,
        responses={200: LeaseScheduleSerializer},
        description="Change a schedule: the fields given, and a `reason` (platform admins).",
    )
    def patch(self, request: SignedInApiRequest, pk: int) -> Response:
        saved = _save(request, _schedule(request, pk))
        return Response(LeaseScheduleSerializer(saved).data)

    @extend_schema(
        request=inline_serializer("LeaseScheduleDelete", {"reason": serializers.CharField()}),
        responses={204: None},
        description="Remove a schedule, with a `reason`; leases it already opened run to "
        "their end (platform admins).",
    )
    def delete(self, request: SignedInApiRequest, pk: int) -> Response:
        schedule = _schedule(request, pk)
        reason = _reason(json_object(request) if request.data else {})
        lease_schedule_delete(user=request.user, schedule=schedule, reason=reason)
        return Response(status=status.HTTP_204_NO_CONTENT)
