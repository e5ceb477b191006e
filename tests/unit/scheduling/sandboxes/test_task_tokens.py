"""A batch task that asks for live sandboxes (`sandboxes: true`) gets a token for its own
project's sandbox API only, valid while it runs (docs/sandboxes.md, "From a batch task")."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from scheduling import tokens
from scheduling.backends.base import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import backend_poll
from scheduling.engine.dispatch import task_dispatch
from scheduling.models import Sandbox, Task
from tests.conftest import descriptor, submit
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


@pytest.fixture
def agent_task(api) -> Task:
    made = submit(api, descriptor(type="agent", sandboxes=True, walltime="30m"))
    assert made.status_code == 201, made.content
    task = Task.objects.get(pk=made.json()["id"])
    assert task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    FakeBackend(alias="fake").finish(task.backend_id, JobState.RUNNING)
    backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "running"
    return task


def _token_of(task: Task) -> str:
    request = FakeBackend.requests_for("fake")[task.key]
    return dict(request.spec.secret_env)["SWITCHYARD_TOKEN"]


def _client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_the_task_gets_the_url_and_a_token_that_is_never_stored(agent_task, settings):
    request = FakeBackend.requests_for("fake")[agent_task.key]
    assert request.spec.env_dict["SWITCHYARD_URL"] == settings.SWITCHYARD_SANDBOX_API_URL
    token = _token_of(agent_task)
    scope = tokens.check(token)
    assert scope is not None and (scope.task_id, scope.project) == (agent_task.pk, "materials")
    assert token not in str(Task.objects.get(pk=agent_task.pk).spec)


def test_the_token_creates_and_uses_its_projects_sandboxes_and_the_task_page_lists_them(
    agent_task, browser
):
    client = _client(_token_of(agent_task))
    made = create(client)
    assert made.status_code == 201, made.content
    sid = made.json()["id"]
    assert made.json()["created_by_task"] == agent_task.pk
    client.put(f"/api/v1/sandboxes/{sid}/files/tool.txt", data=b"42", content_type="text/plain")
    assert run(client, sid, ["cat", "tool.txt"]).json()["stdout"] == "42"
    page = browser.get(f"/tasks/{agent_task.pk}/").content.decode()
    assert sid in page and "Sandboxes it used" in page


def test_the_token_reaches_nothing_else(agent_task, researcher):
    client = _client(_token_of(agent_task))
    assert create(client, project="climate").status_code == 400  # alice's, not the task's
    assert client.get("/api/v1/tasks/").status_code == 401
    assert client.get("/api/v1/files/").status_code == 401
    # A sandbox of the same user in another project does not exist for the token.
    other = APIClient()
    other.force_authenticate(researcher)
    sid = create(other, project="climate").json()["id"]
    assert client.get(f"/api/v1/sandboxes/{sid}/").status_code == 404


def test_the_token_dies_with_its_task_and_takes_its_sandboxes_along(agent_task):
    client = _client(_token_of(agent_task))
    sid = create(client).json()["id"]
    FakeBackend(alias="fake").finish(
        agent_task.key, FakeBackend.jobs_for("fake")[agent_task.key].state.SUCCEEDED, exit_code=0
    )
    from scheduling.engine import backend_poll

    backend_poll("fake")
    assert client.get(f"/api/v1/sandboxes/{sid}/").status_code == 401
    sandbox = Sandbox.objects.get(public_id=sid)
    assert (sandbox.state, sandbox.end_reason) == ("ended", "its task ended")


def test_the_token_dies_with_its_owners_account(agent_task, researcher):
    client = _client(_token_of(agent_task))
    sid = create(client).json()["id"]
    researcher.is_active = False
    researcher.save(update_fields=["is_active"])
    assert client.get(f"/api/v1/sandboxes/{sid}/").status_code == 401
    assert create(client).status_code == 401


def test_an_expired_or_forged_token_is_refused(agent_task):
    expired = tokens.mint(agent_task.pk, "materials", lifetime_s=-1)
    assert create(_client(expired)).status_code == 401
    forged = _token_of(agent_task)[:-3] + "abc"
    assert create(_client(forged)).status_code == 401


def test_sandboxes_must_be_true_or_false(api):
    refused = submit(api, descriptor(sandboxes="yes"))
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["field"] == "sandboxes"
