"""The cheap submission path (docs/deployment.md, "Throughput"): the 201 body built directly
equals the serializer's, and the brief token and membership caches never outlive a change
made in this process."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from portal import hot
from portal.auth import issue_token
from portal.models import Membership
from scheduling.models import Task
from scheduling.serializers import TaskSerializer
from tests.conftest import descriptor, submit


@pytest.fixture
def token_api(researcher, settings):
    settings.SWITCHYARD_AUTH_CACHE_SECONDS = 10
    hot.TOKENS.clear()
    hot.MEMBERS.clear()
    token, row = issue_token(researcher)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    yield client, row
    hot.TOKENS.clear()
    hot.MEMBERS.clear()


@pytest.mark.parametrize(
    "extra",
    [{}, {"priority": "low"}, {"resources": {"cpus": 2, "memory": "2Gi"}, "retry_count": 2}],
)
def test_the_201_body_is_what_the_serializer_gives_for_the_stored_task(api, extra):
    response = submit(api, descriptor(**extra))
    assert response.status_code == 201, response.content
    task = Task.objects.get(pk=response.json()["id"])
    request = response.wsgi_request
    expected = TaskSerializer(task, context={"request": request}).data
    assert response.json() == dict(expected)


def test_the_201_body_of_a_waiting_task_matches_too(api):
    first = submit(api, descriptor(name="first")).json()
    response = submit(api, descriptor(name="second", depends_on=[first["id"]]))
    assert response.status_code == 201, response.content
    task = Task.objects.get(pk=response.json()["id"])
    expected = TaskSerializer(task, context={"request": response.wsgi_request}).data
    assert response.json() == dict(expected)
    assert response.json()["state"] == "waiting"


def test_a_warm_submission_asks_the_database_less(token_api):
    client, _ = token_api
    assert submit(client, descriptor(name="cold")).status_code == 201
    with CaptureQueriesContext(connection) as warm:
        assert submit(client, descriptor(name="warm")).status_code == 201
    tables = " ".join(q["sql"] for q in warm.captured_queries)
    assert "knox_authtoken" not in tables  # the token is known
    assert "portal_membership" not in tables  # and so is the membership
    assert len(warm.captured_queries) <= 6, [q["sql"][:80] for q in warm.captured_queries]


def test_a_revoked_token_is_refused_at_once_in_the_process_that_revoked_it(token_api):
    client, row = token_api
    assert client.get("/api/v1/tasks/").status_code == 200
    row.delete()
    assert client.get("/api/v1/tasks/").status_code == 401


def test_a_deactivated_user_is_refused_at_once(token_api, researcher):
    client, _ = token_api
    assert client.get("/api/v1/tasks/").status_code == 200
    researcher.is_active = False
    researcher.save()
    assert client.get("/api/v1/tasks/").status_code == 401


def test_a_removed_member_cannot_submit_to_the_project_any_more(token_api, researcher):
    client, _ = token_api
    assert submit(client, descriptor(name="before")).status_code == 201
    Membership.objects.filter(user=researcher, project__slug="materials").delete()
    response = submit(client, descriptor(name="after"))
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "project"


def test_with_the_caches_off_every_request_asks_again(token_api, settings):
    client, row = token_api
    settings.SWITCHYARD_AUTH_CACHE_SECONDS = 0
    assert client.get("/api/v1/tasks/").status_code == 200
    with CaptureQueriesContext(connection) as again:
        assert client.get("/api/v1/tasks/").status_code == 200
    assert any("knox_authtoken" in q["sql"] for q in again.captured_queries)
