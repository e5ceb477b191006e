"""The task page: a higher level is offered only to work that waits, an approved one shows
at once as the page's level, and the workflow link is shown only to whom its page answers."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling.models import Task, Workflow
from tests.conftest import descriptor, submit


def _client(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def _task(api, name: str = "sim") -> Task:
    response = submit(api, descriptor(name=name, type="hpc-simulation"))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


@pytest.mark.parametrize(
    ("state", "offered"), [("waiting", True), ("running", False), ("succeeded", False)]
)
def test_a_higher_level_is_offered_only_before_the_task_starts(browser, api, state, offered):
    task = _task(api)
    Task.objects.filter(pk=task.pk).update(state=state, started_at=timezone.now())
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert ('id="ask-priority"' in page) is offered


def test_asking_for_a_running_task_is_refused_saying_why(browser, api):
    task = _task(api)
    Task.objects.filter(pk=task.pk).update(state="running", started_at=timezone.now())
    body = {"task": task.pk, "level": "high", "reason": "deadline", "until": "2h"}
    response = api.post("/api/v1/priority-requests/", body, format="json")
    assert response.status_code == 409
    error = response.json()["errors"][0]
    assert error["field"] == "task" and error["got"] == "running"
    assert "already started" in error["message"]
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert "Started at level" in page and "<b>Level:</b>" not in page


def test_after_approval_the_page_shows_the_new_level_beside_approved(browser, api, worker):
    task = _task(api)
    Task.objects.filter(pk=task.pk).update(state="waiting")
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="task-level-name">low<' in page
    browser.post(f"/tasks/{task.pk}/priority/", {"level": "high", "reason": "paper", "until": "3h"})
    request = task.priority_requests.get()
    with worker():
        _client("quinn").post(f"/priority-requests/{request.pk}/approve/", {"comment": "ok"})
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert 'state-approved">approved<' in page
    assert 'id="task-level-name">high<' in page


def test_a_request_whose_task_started_meanwhile_is_not_approved(browser, api):
    task = _task(api)
    Task.objects.filter(pk=task.pk).update(state="waiting")
    browser.post(f"/tasks/{task.pk}/priority/", {"level": "high", "reason": "paper", "until": "3h"})
    request = task.priority_requests.get()
    Task.objects.filter(pk=task.pk).update(state="running", started_at=timezone.now())
    quinn = APIClient()
    quinn.force_authenticate(User.objects.get(username="quinn"))
    response = quinn.post(f"/api/v1/priority-requests/{request.pk}/approve/", {}, format="json")
    assert response.status_code == 409
    error = response.json()["errors"][0]
    assert error["field"] == "task" and error["got"] == "running"
    assert "reject the request or let it expire" in error["message"]
    request.refresh_from_db()
    assert request.state == "pending"


@pytest.fixture
def flow_task(api) -> Task:
    flow = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "pipeline",
        "project": "materials",
        "tasks": [{"name": "prep", "command": ["true"], "type": "hpc-simulation"}],
    }
    made = api.post("/api/v1/workflows/", data=json.dumps(flow), content_type="application/json")
    assert made.status_code == 201, made.content
    return Task.objects.get(workflow=Workflow.objects.get())


def test_a_member_follows_the_workflow_link(browser, flow_task):
    page = browser.get(f"/tasks/{flow_task.pk}/").content.decode()
    link = f'href="/workflows/{flow_task.workflow_id}/" id="back-to-workflow"'
    assert link in page
    assert browser.get(f"/workflows/{flow_task.workflow_id}/").status_code == 200


def test_a_queue_admin_who_sees_the_task_gets_no_link_to_a_404(flow_task):
    quinn = _client("quinn")
    page = quinn.get(f"/tasks/{flow_task.pk}/")
    assert page.status_code == 200
    text = page.content.decode()
    assert f"/workflows/{flow_task.workflow_id}/" not in text
    assert 'id="task-workflow">pipeline<' in text  # named, not linked
    assert quinn.get(f"/workflows/{flow_task.workflow_id}/").status_code == 404
