"""A queue admin sets the queue's sandbox settings on its page and through the API; a bad
value is refused naming the field (docs/sandboxes.md)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from scheduling.models import Queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(site) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


def _patch(client: APIClient, changes: dict):
    body = json.dumps({**changes, "reason": "sandboxes"})
    return client.patch(
        "/api/v1/queues/inference-agent/", data=body, content_type="application/json"
    )


def test_the_sandbox_settings_are_set_and_checked(admin_api):
    done = _patch(
        admin_api,
        {
            "over_concurrency": "refuse",
            "idle_scale_in_s": 60,
            "egress_allow": ["pypi.org:443"],
            "warm_pool": {"": 3},
        },
    )
    assert done.status_code == 200, done.content
    queue = Queue.objects.get(name="inference-agent")
    assert (queue.over_concurrency, queue.idle_scale_in_s) == ("refuse", 60)
    assert queue.egress_allow == ["pypi.org:443"] and queue.warm_pool == {"": 3}
    for changes, field in (
        ({"egress_allow": ["10.1.1.1:80"]}, "egress_allow"),
        ({"warm_pool": {"": 99}}, "warm_pool"),
        ({"warm_pool": {"no such/IMAGE!": 1}}, "warm_pool"),
        ({"over_concurrency": "drop"}, "over_concurrency"),
    ):
        refused = _patch(admin_api, changes)
        assert refused.status_code == 400, refused.content
        assert refused.json()["errors"][0]["field"] == field


def test_the_queue_page_shows_them(site, browser):
    page = browser.get("/queues/").content.decode()
    assert "live sandboxes end after 2min idle" in page and "warm pool 2×system" in page
