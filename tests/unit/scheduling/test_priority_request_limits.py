"""Priority requests: nobody approves their own, a task has one pending at a time, a person a
bounded number, and the inbox is paged (docs/policy.md, docs/security.md)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import Membership, Project
from scheduling.models import PriorityRequest, Queue, Task
from tests.conftest import descriptor, submit


def _api(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _pending(user: User, n: int, queue: str = "hpc") -> None:
    PriorityRequest.objects.bulk_create(
        PriorityRequest(
            requester=user,
            project=Project.objects.get(slug="materials"),
            queue=Queue.objects.get(name=queue),
            level=2,
            reason=f"deadline {i}",
            until=timezone.now() + timedelta(hours=2),
        )
        for i in range(n)
    )


@pytest.fixture
def quinn(site) -> User:
    """The demo queue admin, here also a researcher in materials."""
    quinn = User.objects.get(username="quinn")
    Membership.objects.create(user=quinn, project=Project.objects.get(slug="materials"))
    return quinn


def _ask(user: User, task: Task):
    return _api(user).post(
        "/api/v1/priority-requests/",
        {"task": task.pk, "level": "high", "reason": "paper deadline", "until": "2h"},
        format="json",
    )


def _task(user: User, **overrides) -> Task:
    response = submit(_api(user), descriptor(type="hpc-simulation", queue="hpc", **overrides))
    assert response.status_code == 201, response.content
    return Task.objects.get(pk=response.json()["id"])


def test_a_queue_admin_cannot_approve_their_own_request_on_the_api_or_the_page(quinn):
    task = _task(quinn)
    asked = _ask(quinn, task)
    assert asked.status_code == 201, asked.content
    pk = asked.json()["id"]
    refused = _api(quinn).post(f"/api/v1/priority-requests/{pk}/approve/", {}, format="json")
    assert refused.status_code == 403
    [error] = refused.json()["errors"]
    assert (error["field"], error["got"]) == ("requester", "quinn")
    assert "another admin" in error["message"]
    page = Client()
    page.force_login(quinn)
    assert page.post(f"/priority-requests/{pk}/approve/").status_code == 403
    assert PriorityRequest.objects.get(pk=pk).state == "pending"
    # The inbox offers them no Approve button on it, only a way to withdraw it.
    inbox = page.get("/priority-requests/").content.decode()
    assert f'id="reject-{pk}"' in inbox and f'id="approve-{pk}"' not in inbox
    # Another decider may: a platform admin approves it.
    admin = _api(User.objects.get(username="admin"))
    approved = admin.post(f"/api/v1/priority-requests/{pk}/approve/", {}, format="json")
    assert approved.status_code == 200 and approved.json()["state"] == "approved"
    # Rejecting their own request is allowed: it withdraws it.
    again = _ask(quinn, _task(quinn, name="t2")).json()["id"]
    withdrawn = _api(quinn).post(f"/api/v1/priority-requests/{again}/reject/", {}, format="json")
    assert withdrawn.status_code == 200 and withdrawn.json()["state"] == "rejected"


def test_a_task_never_holds_two_pending_requests(researcher):
    task = _task(researcher, priority="high")  # its descriptor already asked
    assert _ask(researcher, task).status_code == 409
    with pytest.raises(IntegrityError), transaction.atomic():
        PriorityRequest.objects.create(
            requester=researcher,
            project=task.project,
            queue=task.queue,
            task=task,
            level=2,
            reason="again, from a second window at the same moment",
            until=timezone.now() + timedelta(hours=1),
        )


def test_a_batch_asking_for_more_raises_than_the_ceiling_is_refused_whole(researcher, settings):
    settings.SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING = 5
    _pending(researcher, 2)
    docs = [descriptor(name=f"sweep-{i}", priority="high") for i in range(8)]
    response = _api(researcher).post(
        "/api/v1/tasks/batch/", data=json.dumps({"tasks": docs}), content_type="application/json"
    )
    assert response.status_code == 409, response.content
    [error] = response.json()["errors"]
    # 2 pending + 3 fit; the fourth task of the batch is the first one over.
    assert (error["field"], error["got"]) == ("tasks[3].priority", 10)
    assert "at most 5 pending priority requests" in error["message"]
    assert not Task.objects.filter(name__startswith="sweep-").exists()
    assert PriorityRequest.objects.filter(requester=researcher).count() == 2


def test_single_submissions_workflows_and_requests_stop_at_the_ceiling(researcher, settings):
    settings.SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING = 3
    _pending(researcher, 2)
    task = _task(researcher, priority="high")  # the third: fits
    over = submit(_api(researcher), descriptor(name="one-more", priority="high"))
    assert over.status_code == 409 and over.json()["errors"][0]["field"] == "priority"
    flow = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": [
            {
                k: v
                for k, v in descriptor(name="a", priority="high").items()
                if k not in ("apiVersion", "kind", "project")
            }
        ],
    }
    refused = _api(researcher).post(
        "/api/v1/workflows/", data=json.dumps(flow), content_type="application/json"
    )
    assert refused.status_code == 409, refused.content
    assert refused.json()["errors"][0]["field"] == "tasks[0].priority"
    plain = _task(researcher, name="plain")  # without priority: high, nothing to bound
    asked = _ask(researcher, plain)
    assert asked.status_code == 409 and asked.json()["errors"][0]["field"] == "task"
    assert PriorityRequest.objects.filter(requester=researcher, state="pending").count() == 3
    assert task.priority_requests.count() == 1


def test_the_requests_page_pages_a_full_inbox(site):
    alice, quinn = User.objects.get(username="alice"), User.objects.get(username="quinn")
    _pending(alice, 120)
    page = Client()
    page.force_login(quinn)
    first = page.get("/priority-requests/").content.decode()
    assert first.count('class="approve"') == 50
    assert "page 1 of 3" in first
    last = page.get("/priority-requests/?page=3").content.decode()
    assert last.count('class="approve"') == 20
    listed = _api(quinn).get("/api/v1/priority-requests/?inbox=1").json()
    assert listed["count"] == 120 and len(listed["results"]) == 50
