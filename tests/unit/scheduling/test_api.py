from __future__ import annotations

import json

import pytest
import yaml

from scheduling.models import Task
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

KINDS_WITHOUT_TYPE = [
    # (what, resources, timing, expected type, expected queue)
    (
        "training",
        {"nodes": 4, "gpus": 32, "cpus": 256, "memory": "512Gi"},
        {"estimate": "40h"},
        "ai-training",
        "training",
    ),
    ("hpc", {"cpus": 256, "memory": "256Gi"}, {"walltime": "48h"}, "hpc-simulation", "hpc"),
    (
        "inference",
        {"gpus": 1, "cpus": 8, "memory": "32Gi"},
        {"walltime": "30m"},
        "ai-inference",
        "inference-agent",
    ),
    ("agent", {"cpus": 1, "memory": "1Gi"}, {"walltime": "5m"}, "agent", "inference-agent"),
]


@pytest.mark.parametrize(("what", "resources", "timing", "type_", "queue"), KINDS_WITHOUT_TYPE)
def test_each_workload_kind_without_type_lands_in_the_seeded_queue(
    api, what, resources, timing, type_, queue
):
    doc = descriptor(name=f"{what}-1", resources=resources, **{"walltime": None, **timing})
    response = submit(api, doc)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["type"], body["queue"], body["state"]) == (type_, queue, "pending")
    assert "no type given" in body["classify_reason"]
    assert queue in body["routing_reason"]
    task = Task.objects.get(pk=body["id"])
    assert task.classify_reason == body["classify_reason"]
    assert task.events.get().to_state == "pending"


def test_explicit_type_and_matching_queue_are_honoured(api):
    doc = descriptor(
        type="ai-training",
        queue="training",
        estimate="2h",
        walltime=None,
        resources={"gpus": 8, "cpus": 64, "memory": "64Gi"},
    )
    body = submit(api, doc).json()
    assert (body["type"], body["queue"]) == ("ai-training", "training")
    assert "declared" in body["classify_reason"]
    assert "requested" in body["routing_reason"]


def test_explicit_queue_that_does_not_take_the_type_is_refused_with_the_reason(api):
    response = submit(
        api, descriptor(type="ai-training", queue="hpc", estimate="2h", walltime="3h")
    )
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "queue"
    assert "hpc" in error["message"] and "ai-training" in error["message"]
    assert Task.objects.count() == 0


BAD = {
    "wrong type": (descriptor(resources={"cpus": "eight"}), "resources.cpus"),
    "unknown field": (descriptor(colour="blue"), "colour"),
    "unknown nested field": (descriptor(resources={"cpus": 1, "gpu": 1}), "resources.gpu"),
    "negative gpus": (descriptor(resources={"gpus": -1}), "resources.gpus"),
    "absurd cpus": (descriptor(resources={"cpus": 10**9}), "resources.cpus"),
    "walltime over the queue maximum": (
        descriptor(type="hpc-simulation", walltime="100h"),
        "walltime",
    ),
    "training without estimate": (
        descriptor(type="ai-training", resources={"gpus": 8, "cpus": 64}),
        "estimate",
    ),
    "no node can hold it": (
        descriptor(
            type="ai-training", estimate="3h", walltime="4h", resources={"nodes": 1, "gpus": 16}
        ),
        "resources.gpus",
    ),
    "not a member of the project": (descriptor(project="genomics"), "project"),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_bad_descriptors_get_a_400_naming_the_field_and_store_nothing(api, case):
    doc, field = BAD[case]
    response = submit(api, doc)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert field in [e["field"] for e in errors], errors
    assert all(set(e) == {"field", "message", "got"} for e in errors)
    assert Task.objects.count() == 0


RAW_BAD = {
    "broken yaml": ("name: [unclosed\n", "application/yaml"),
    "broken json": ('{"name": ', "application/json"),
    "yaml alias bomb": (
        "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
        "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nf: [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n",
        "application/yaml",
    ),
    "10 MB document": ("name: " + "x" * (10 * 1024 * 1024) + "\n", "application/yaml"),
    "top level list": ("[1, 2]", "application/json"),
    "NUL byte": ('{"name": "a\u0000b"}', "application/json"),
}


@pytest.mark.parametrize("case", RAW_BAD, ids=list(RAW_BAD))
def test_malformed_documents_get_a_400_in_the_error_shape(api, case):
    body, content_type = RAW_BAD[case]
    response = submit(api, body, content_type)
    # Over the path's body limit, refused before it is read (config/middleware.py).
    expected = 413 if case == "10 MB document" else 400
    assert response.status_code == expected, response.content[:300]
    assert response.json()["errors"][0]["message"]
    assert Task.objects.count() == 0


def test_yaml_body_is_accepted(api):
    response = submit(api, yaml.safe_dump(descriptor(name="from-yaml")), "application/yaml")
    assert response.status_code == 201, response.json()
    assert Task.objects.get().descriptor_format == "yaml"


def test_descriptor_file_upload_is_accepted(api):
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("task.yaml", yaml.safe_dump(descriptor(name="uploaded")).encode())
    response = api.post("/api/v1/tasks/", {"descriptor": upload}, format="multipart")
    assert response.status_code == 201, response.json()
    assert response.json()["name"] == "uploaded"


def test_unsupported_content_type_is_refused_in_the_error_shape(api):
    response = api.post("/api/v1/tasks/", data="name=x", content_type="text/plain")
    assert response.status_code == 415
    assert response.json()["errors"][0]["got"] == "text/plain"


def test_list_shows_only_the_callers_projects_and_filters(api, outsider_api):
    submit(api, descriptor(name="mine"))
    submit(outsider_api, descriptor(name="theirs", project="genomics"))
    names = [t["name"] for t in api.get("/api/v1/tasks/").json()["results"]]
    assert names == ["mine"]
    assert api.get("/api/v1/tasks/?state=running").json()["results"] == []
    assert len(api.get("/api/v1/tasks/?state=pending&project=materials").json()["results"]) == 1
    bad = api.get("/api/v1/tasks/?state=sleeping")
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "state"


def test_another_projects_task_is_a_404_everywhere(api, outsider_api):
    task_id = submit(api, descriptor()).json()["id"]
    for response in (
        outsider_api.get(f"/api/v1/tasks/{task_id}/"),
        outsider_api.get(f"/api/v1/tasks/{task_id}/log/"),
        outsider_api.post(f"/api/v1/tasks/{task_id}/cancel/"),
    ):
        assert response.status_code == 404
        error = {"field": None, "message": "no such task", "got": None}
        assert response.json() == {"errors": [error]}
    # the words of a task that does not exist at all
    assert outsider_api.get("/api/v1/tasks/999999/").json() == {"errors": [error]}
    assert Task.objects.get(pk=task_id).state == "pending"


def test_cancel_is_idempotent_and_a_finished_task_is_a_conflict(api):
    task_id = submit(api, descriptor()).json()["id"]
    first = api.post(f"/api/v1/tasks/{task_id}/cancel/")
    again = api.post(f"/api/v1/tasks/{task_id}/cancel/")
    assert (first.status_code, first.json()["state"]) == (200, "cancelled")
    assert again.status_code == 200
    Task.objects.filter(pk=task_id).update(state="succeeded")
    assert api.post(f"/api/v1/tasks/{task_id}/cancel/").status_code == 409


def test_detail_has_events_reasons_and_descriptor(api):
    task_id = submit(api, descriptor(name="detail")).json()["id"]
    body = api.get(f"/api/v1/tasks/{task_id}/").json()
    assert body["events"][0]["to_state"] == "pending"
    assert body["wait_reason"]
    assert json.loads(body["descriptor"])["name"] == "detail"


def test_token_auth_works_and_anonymous_is_refused(site, client):
    answer = client.post(
        "/api/v1/auth/token/", {"username": "alice", "password": "alice-demo-pass"}
    )
    assert answer.status_code == 200, answer.content
    token = answer.json()["token"]
    ok = client.get("/api/v1/tasks/", HTTP_AUTHORIZATION=f"Token {token}")
    assert ok.status_code == 200
    anonymous = client.get("/api/v1/tasks/")
    assert anonymous.status_code in (401, 403)
    assert anonymous.json()["errors"][0]["field"] is None


def test_schema_docs_and_descriptor_schema_are_served(api):
    assert api.get("/api/v1/schema/").status_code == 200
    assert api.get("/api/v1/docs/").status_code == 200
    schema = api.get("/api/v1/descriptor-schema/").json()
    assert schema["additionalProperties"] is False
    assert "resources" in schema["properties"]
