"""Bad input is never a 5xx, and always the error shape; a browser session can submit JSON.

A fuzz of every query parameter and id the API and pages read: huge, negative, non-numeric,
unicode, control characters, long.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from knox.models import AuthToken

from scheduling.models import Task, Workflow
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

HOSTILE = [
    "9223372036854775807",
    "99999999999999999999",
    "-1",
    "-9223372036854775809",
    "0",
    "abc",
    "1.5",
    "1e9",
    "--5",
    " 7",
    "²",
    "٣",
    "🚀",
    "nul\x00byte",
    "tab\tand\nnewline",
    "x" * 5000,
    "",
    "%00",
    "' OR 1=1 --",
]

API_PARAMS = {
    "/api/v1/tasks/": ["state", "project", "queue", "type", "workflow", "page"],
    "/api/v1/workflows/": ["page"],
    "/api/v1/tasks/{task}/log/": ["offset", "limit"],
}
PAGE_PARAMS = {"/": ["state", "page"], "/workflows/": ["state", "page"]}


@pytest.fixture
def task(api) -> Task:
    response = submit(api, descriptor())
    assert response.status_code == 201
    return Task.objects.get(pk=response.json()["id"])


def _assert_error_shape(response) -> None:
    body = response.json()
    assert set(body) == {"errors"} and body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "message", "got"}, error


@pytest.mark.parametrize("path", list(API_PARAMS))
def test_every_api_query_parameter_survives_hostile_values(api, task, path):
    url = path.format(task=task.pk)
    for param in API_PARAMS[path]:
        for value in HOSTILE:
            response = api.get(url, {param: value})
            assert response.status_code < 500, (param, value, response.content[:300])
            assert response["Content-Type"].startswith("application/json"), (param, value)
            if response.status_code >= 400:
                _assert_error_shape(response)


@pytest.mark.parametrize("path", list(PAGE_PARAMS))
def test_every_page_query_parameter_survives_hostile_values(browser, task, path):
    for param in PAGE_PARAMS[path]:
        for value in HOSTILE:
            response = browser.get(path, {param: value})
            assert response.status_code < 500, (param, value)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/tasks/{id}/",
        "/api/v1/tasks/{id}/log/",
        "/api/v1/workflows/{id}/",
        "/tasks/{id}/",
        "/workflows/{id}/",
    ],
)
def test_ids_too_large_for_the_database_are_not_found(api, browser, path):
    for pk in ("9223372036854775808", "99999999999999999999999", "0"):
        client = api if path.startswith("/api/") else browser
        response = client.get(path.format(id=pk))
        assert response.status_code == 404, (path, pk)


def test_the_two_reported_500s_are_400s_in_the_error_shape(api, task):
    log = api.get(f"/api/v1/tasks/{task.pk}/log/", {"offset": "9223372036854775807"})
    assert log.status_code == 400
    assert log.json()["errors"][0]["field"] == "offset"
    tasks = api.get("/api/v1/tasks/", {"workflow": "99999999999999999999"})
    assert tasks.status_code == 400
    assert tasks.json()["errors"][0]["field"] == "workflow"


def test_a_9_mb_multipart_text_field_answers_the_error_shape(api):
    response = api.post("/api/v1/tasks/", {"descriptor": "x" * (9 << 20)}, format="multipart")
    assert response.status_code in (400, 413)
    _assert_error_shape(response)
    assert response["Content-Type"].startswith("application/json")


def test_a_descriptor_declared_too_large_is_refused_before_it_is_read(researcher, settings):
    body = json.dumps(descriptor(name="x" * 10)).encode()
    # A real token: over the anonymous body limit, the middleware looks at who is sending.
    token = AuthToken.objects.create(researcher)[1]
    response = Client().generic(
        "POST",
        "/api/v1/tasks/",
        body,
        content_type="application/json",
        CONTENT_LENGTH=str(settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES + 1),
        HTTP_AUTHORIZATION=f"Token {token}",
    )
    assert response.status_code == 400
    assert "the limit is" in response.json()["errors"][0]["message"]


@pytest.fixture
def session(researcher) -> Client:
    """A browser: CSRF checks on, logged in through the login page."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    client.get("/")  # sets the csrftoken cookie
    return client


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", json.dumps(descriptor(name="from-json"))),
        (
            "application/yaml",
            "apiVersion: switchyard/v1\nkind: Task\nname: from-yaml\nproject: materials\n"
            'walltime: 10m\ncommand: ["true"]\n',
        ),
    ],
)
def test_a_browser_session_submits_json_and_yaml_with_its_csrf_token(session, content_type, body):
    token = session.cookies["csrftoken"].value
    response = session.post(
        "/api/v1/tasks/", body, content_type=content_type, HTTP_X_CSRFTOKEN=token
    )
    assert response.status_code == 201, response.content
    # Without the token, the session's request is refused (CSRF is checked, not skipped).
    refused = session.post("/api/v1/tasks/", body, content_type=content_type)
    assert refused.status_code == 403
    _assert_error_shape(refused)


def test_a_browser_session_submits_a_workflow_as_json(session):
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": [{"name": "a", "command": ["true"]}],
    }
    response = session.post(
        "/api/v1/workflows/",
        json.dumps(doc),
        content_type="application/json",
        HTTP_X_CSRFTOKEN=session.cookies["csrftoken"].value,
    )
    assert response.status_code == 201, response.content
    assert Workflow.objects.filter(name="wf").exists()


def test_an_image_is_refused_never_ignored(api):
    response = submit(api, descriptor(image="nvcr.io/nvidia/pytorch:24.01-py3"))
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "image"
    assert "no image registry configured" in error["message"]
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    "path",
    ["/api/v1/tasks/", "/api/v1/tasks/preview/", "/api/v1/tasks/batch/", "/api/v1/workflows/"],
)
@pytest.mark.parametrize("where", ["name", "env", "secret_env", "command"])
def test_half_a_surrogate_pair_anywhere_is_a_400_that_does_not_echo_it(api, path, where):
    task = descriptor(name="t1")
    if where == "name":
        task["name"] = "\ud800"
    elif where == "command":
        task["command"] = ["echo", "\ud800"]
    else:
        task[where] = {"A": "x\ud800"}
    body = {
        "/api/v1/tasks/batch/": {"tasks": [task]},
        "/api/v1/workflows/": {
            "kind": "Workflow",
            "name": "wf",
            "project": "materials",
            "tasks": [task],
        },
    }.get(path, task)
    # json.dumps writes the lone surrogate as the escape \ud800, as a hostile client would.
    response = api.generic("POST", path, json.dumps(body), content_type="application/json")
    assert response.status_code == 400, response.content
    [error] = response.json()["errors"]  # a preview answers its own fields beside them
    assert "unpaired surrogate escape" in error["message"]
    assert not Task.objects.exists()
