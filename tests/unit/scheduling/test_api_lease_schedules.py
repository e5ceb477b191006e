"""The nightly lease schedules through the API (docs/api.md): what the Capacity page keeps,
checked by the page's own form and saved by its service, each change a version with its
reason; to anyone but a platform admin they do not exist."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from portal.models import ConfigVersion
from scheduling.models import LeaseSchedule

pytestmark = pytest.mark.django_db

LIST = "/api/v1/lease-schedules/"
NEW = {
    "pool": "inference-agent",
    "queue": "training",
    "count": 2,
    "start": "21:30",
    "duration": "5h",
    "reason": "more nights for training",
}


def _client(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


@pytest.fixture
def admin(site) -> APIClient:
    return _client("admin")


def _versions() -> list[ConfigVersion]:
    return list(ConfigVersion.objects.filter(model="scheduling.leaseschedule").order_by("id"))


def test_a_platform_admin_adds_changes_and_removes_one_each_a_version_with_its_reason(admin):
    before = len(_versions())
    created = admin.post(LIST, NEW, format="json")
    assert created.status_code == 201, created.json()
    shown = created.json()
    assert {k: shown[k] for k in ("pool", "queue", "count", "start", "duration", "enabled")} == {
        "pool": "inference-agent",
        "queue": "training",
        "count": 2,
        "start": "21:30",
        "duration": "5h",
        "enabled": True,
    }
    assert shown["duration_s"] == 5 * 3600
    one = f"{LIST}{shown['id']}/"
    assert admin.get(one).json() == shown
    assert shown in admin.get(LIST).json()

    changed = admin.patch(one, {"count": 3, "enabled": False, "reason": "fewer"}, format="json")
    assert changed.status_code == 200, changed.json()
    schedule = LeaseSchedule.objects.get(pk=shown["id"])
    assert (schedule.count, schedule.enabled, schedule.duration_s) == (3, False, 5 * 3600)
    assert admin.get(one).json()["start"] == "21:30"  # what was not sent stays

    refused = admin.delete(one, {"reason": 7}, format="json")  # a reason must be text
    assert refused.status_code == 400 and refused.json()["errors"][0]["field"] == "reason"
    assert admin.get(one).status_code == 200
    assert admin.delete(one, {"reason": "summer"}, format="json").status_code == 204
    assert not LeaseSchedule.objects.filter(pk=shown["id"]).exists()
    assert admin.get(one).status_code == 404
    reasons = [v.reason for v in _versions()[before:]]
    assert reasons == ["more nights for training", "fewer", "summer"]
    assert {v.author_name for v in _versions()[before:]} == {"admin"}


@pytest.mark.parametrize(
    ("sent", "field"),
    [
        ({"count": "many"}, "count"),
        ({"count": True}, "count"),
        ({"count": 0}, "count"),
        ({"start": "25:00"}, "start"),
        ({"duration": "soon"}, "duration"),
        ({"duration": "9h"}, "duration"),  # past SWITCHYARD_LEASE_MAX_HOURS
        ({"pool": "atlantis"}, "pool"),
        ({"queue": "inference-agent"}, "queue"),  # a queue of the lending pool itself
        ({"reason": ""}, "reason"),
        ({"reason": 5}, "reason"),  # not written into the history as "5"
        ({"reason": ["why"]}, "reason"),
        ({"enabled": "no"}, "enabled"),  # a checkbox would read it as on
        ({"colour": "red"}, "colour"),  # a field it does not know
    ],
)
def test_a_bad_value_is_refused_naming_its_field_and_nothing_is_saved(admin, sent, field):
    before = LeaseSchedule.objects.count(), len(_versions())
    response = admin.post(LIST, {**NEW, **sent}, format="json")
    assert response.status_code == 400, response.json()
    assert field in {e["field"] for e in response.json()["errors"]}, response.json()
    assert (LeaseSchedule.objects.count(), len(_versions())) == before


def test_to_anyone_else_they_do_not_exist(admin, api):
    made = admin.post(LIST, NEW, format="json").json()
    one = f"{LIST}{made['id']}/"
    for username in ("alice", "quinn", "finn"):
        client = api if username == "alice" else _client(username)
        assert client.get(LIST).json() == []
        assert client.get(one).status_code == 404
        assert client.patch(one, {"count": 9, "reason": "x"}, format="json").status_code == 404
        assert client.delete(one, {"reason": "x"}, format="json").status_code == 404
        assert client.post(LIST, NEW, format="json").status_code == 403
    assert LeaseSchedule.objects.get(pk=made["id"]).count == 2
    assert admin.get(f"{LIST}9223372036854775808/").status_code == 404
