"""`POST /api/v1/tasks/preview/`: what `POST /api/v1/tasks/` would do with the same body, the
same decision as the submit page's preview, and nothing stored."""

from __future__ import annotations

import json
from unittest import mock

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from portal.models import AuditEvent, Project
from scheduling import outbox, services
from scheduling.api.task_preview import TaskPreviewView
from scheduling.api.tasks import TaskListCreate
from scheduling.models import Queue, Quota, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.canary import current_rule_set
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

PREVIEW = "/api/v1/tasks/preview/"
TRAINING = descriptor(
    type="ai-training", resources={"gpus": 8, "cpus": 16}, walltime="3h", estimate="3h"
)
HPC = descriptor(type="hpc-simulation", resources={"cpus": 4}, walltime="1h")
GUESSED = descriptor()  # 1 CPU for 10 minutes: guessed agent
REFUSED = descriptor(resources={"gpus": 8, "cpus": 16}, walltime="3h")  # guessed, too long


def _preview(client: APIClient, doc: dict | str, content_type: str = "application/json"):
    body = doc if isinstance(doc, str) else json.dumps(doc)
    return client.post(PREVIEW, data=body, content_type=content_type)


def _stored() -> tuple[int, int]:
    return Task.objects.count(), AuditEvent.objects.count()


def _hpc_quota(api: APIClient, **fields) -> None:
    """One running task in queue hpc of materials' quota of one."""
    Quota.objects.create(
        project=Project.objects.get(slug="materials"),
        queue=Queue.objects.get(name="hpc"),
        resource="tasks",
        limit=1,
        **fields,
    )
    site_view_invalidate()
    assert submit(api, HPC).status_code == 201
    Task.objects.update(admitted=True, state="running")


@pytest.mark.parametrize(
    ("doc", "setup", "status"),
    [
        pytest.param(TRAINING, None, 200, id="declared-training"),
        pytest.param(HPC, None, 200, id="declared-hpc"),
        pytest.param(GUESSED, None, 200, id="guessed"),
        pytest.param(HPC, {}, 200, id="quota-held"),
        pytest.param(HPC, {"over_quota": "reject"}, 409, id="quota-refuses"),
        pytest.param(REFUSED, None, 400, id="refused"),
    ],
)
def test_the_preview_is_what_the_submit_then_does_and_stores_nothing(
    api, django_capture_on_commit_callbacks, doc, setup, status
):
    if setup is not None:
        _hpc_quota(api, **setup)
    before = _stored()
    with (
        mock.patch.object(outbox, "send", autospec=True) as sent,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        preview = _preview(api, doc)
    assert preview.status_code == status, preview.json()
    assert _stored() == before and callbacks == [] and not sent.called
    shown = preview.json()
    submitted = submit(api, doc)
    if status != 200:
        assert submitted.status_code == status
        assert shown["errors"] == submitted.json()["errors"] and shown["accepted"] is False
        assert _stored() == before
        return
    assert submitted.status_code == 201, submitted.json()
    task = Task.objects.get(pk=submitted.json()["id"])
    assert (shown["type"], shown["queue"]) == (task.type, task.queue.name)
    assert shown["classify_reason"] == task.classify_reason
    assert shown["routing_reason"] == task.routing_reason
    assert shown["accepted"] is True and shown["errors"] == []
    assert shown["type_declared"] == ("type" in doc)


def test_a_guessed_type_names_its_rule_and_the_types_that_would_fit(api):
    shown = _preview(api, GUESSED).json()
    assert shown["type"] == "agent" and shown["type_declared"] is False
    assert "small request (1 CPU ≤ 4, no GPUs)" in shown["classify_reason"]
    assert {"type": "hpc-simulation", "advice": "`type: hpc-simulation` (queue hpc takes it)"} in (
        shown["other_types"]
    )
    declared = _preview(api, {**GUESSED, "type": "agent"}).json()
    assert declared["type_declared"] is True and declared["other_types"] == []


def test_each_quota_comes_with_what_it_counts_and_its_room_and_a_start(api):
    shown = _preview(api, TRAINING).json()
    assert shown["quotas"] == [
        {
            "text": "project materials uses 0/32 GPUs in queue training: room for 32 more GPUs",
            "project": "materials",
            "user": None,
            "queue": "training",
            "resource": "gpus",
            "limit": 32,
            "used": 0.0,
            "left": 32.0,
            "period": None,
        }
    ]
    assert shown["admission"] == "its quota has room now" and shown["held"] is False
    start = shown["start"]
    assert (
        start["at_once"] is True
        and start["by"]
        and (start["position"], start["waiting"])
        == (
            1,
            0,
        )
    )


def test_a_full_quota_is_held_with_no_start(api):
    _hpc_quota(api)
    shown = _preview(api, HPC).json()
    assert shown["held"] is True and shown["start"] is None and shown["accepted"] is True
    (room,) = shown["quotas"]
    assert (room["resource"], room["used"], room["left"]) == ("tasks", 1.0, 0.0)
    assert "it waits for room" in shown["admission"]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("kind: Task\nname: [", "application/yaml"),
        ("[1, 2]", "application/json"),
        (json.dumps({"apiVersion": "switchyard/v1", "kind": "Workflow", "tasks": []}), None),
        ("<task/>", "application/xml"),
    ],
)
def test_bad_input_is_refused_as_the_submit_refuses_it(api, body, content_type):
    content_type = content_type or "application/json"
    preview = _preview(api, body, content_type)
    submitted = submit(api, body, content_type)
    assert preview.status_code == submitted.status_code >= 400
    assert preview.json()["errors"] == submitted.json()["errors"]
    assert Task.objects.count() == 0


def test_yaml_and_a_multipart_file_are_read_as_the_submit_reads_them(api):
    as_yaml = _preview(api, yaml.safe_dump(TRAINING), "application/yaml")
    assert as_yaml.status_code == 200 and as_yaml.json()["queue"] == "training"
    upload = SimpleUploadedFile("job.json", json.dumps(HPC).encode(), "application/json")
    as_file = api.post(PREVIEW, {"descriptor": upload}, format="multipart")
    assert as_file.status_code == 200 and as_file.json()["queue"] == "hpc"
    assert Task.objects.count() == 0


def test_another_projects_member_gets_the_submits_refusal_and_no_quotas(outsider_api):
    preview = _preview(outsider_api, TRAINING)
    submitted = submit(outsider_api, TRAINING)
    assert preview.status_code == submitted.status_code == 400
    assert preview.json()["errors"] == submitted.json()["errors"]
    assert preview.json()["errors"][0]["field"] == "project"
    assert preview.json()["quotas"] == [] and preview.json()["start"] is None


def test_it_asks_to_be_signed_in_and_answers_only_posts(api, site):
    assert APIClient().post(
        PREVIEW, json.dumps(HPC), content_type="application/json"
    ).status_code in (
        401,
        403,
    )
    assert api.get(PREVIEW).status_code == 405


def test_it_takes_the_submits_auth_and_permissions_and_counts_each_users_previews(
    api, outsider_api, monkeypatch
):
    for name in ("authentication_classes", "permission_classes", "parser_classes"):
        assert getattr(TaskPreviewView, name) == getattr(TaskListCreate, name)
    from django.core.cache.backends.locmem import LocMemCache
    from rest_framework.throttling import ScopedRateThrottle

    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"preview": "2/min"})
    # Its own counts: the site's cache may be shared with other tests' users of the same id.
    monkeypatch.setattr(ScopedRateThrottle, "cache", LocMemCache("preview-throttle", {}))
    answers = [_preview(api, HPC).status_code for _ in range(3)]
    assert answers == [200, 200, 429]
    assert _preview(outsider_api, HPC).status_code != 429  # another user's count is its own


def test_the_submit_pages_previews_count_with_the_users_api_previews(
    api, browser, outsider_browser, monkeypatch
):
    """One count per user for both doors: past it the page's preview is a 429 (which htmx
    leaves unswapped: the last preview stays) with when to try again, and does no work."""
    from django.core.cache.backends.locmem import LocMemCache
    from rest_framework.throttling import ScopedRateThrottle

    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"preview": "2/min"})
    monkeypatch.setattr(ScopedRateThrottle, "cache", LocMemCache("preview-throttle-page", {}))
    page = {"descriptor": json.dumps(HPC)}
    assert _preview(api, HPC).status_code == 200
    assert browser.post("/tasks/new/preview/", page).status_code == 200
    with mock.patch.object(services, "submit_preview", autospec=True) as spy:
        refused = browser.post("/tasks/new/preview/", page)
        assert _preview(api, HPC).status_code == 429
    assert refused.status_code == 429, refused.content
    assert 0 < int(refused["Retry-After"]) <= 60
    assert refused.content.decode().startswith("Too many previews: try again in ")
    assert spy.call_count == 0
    assert outsider_browser.post("/tasks/new/preview/", page).status_code == 200


def test_the_page_and_the_api_call_the_one_preview_service(api, browser):
    real = services.submit_preview
    with mock.patch.object(services, "submit_preview", autospec=True, side_effect=real) as spy:
        _preview(api, HPC)
        browser.post("/tasks/new/preview/", {"descriptor": json.dumps(HPC)})
    assert spy.call_count == 2
    assert spy.call_args_list[0].kwargs["task_only"] is True


def test_an_active_canary_is_named_and_takes_no_preview(api, site):
    admin = APIClient()
    admin.force_authenticate(User.objects.get(username="admin"))
    rules = {**current_rule_set(), "name": "all", "share_percent": 100, "reason": "try"}
    started = admin.post(
        "/api/v1/canaries/", data=json.dumps(rules), content_type="application/json"
    )
    assert started.status_code == 201, started.content
    site_view_invalidate()
    assert "(canary #" in Task.objects.get(pk=submit(api, HPC).json()["id"]).routing_reason
    for _ in range(5):
        shown = _preview(api, HPC).json()
        assert "(canary #" not in shown["routing_reason"]
        assert shown["canary"].startswith(f"canary #{started.json()['id']} routes 100%")


def test_the_schema_documents_it(api):
    schema = yaml.safe_load(api.get("/api/v1/schema/").content)
    operation = schema["paths"]["/api/v1/tasks/preview/"]["post"]
    assert "storing nothing" in operation["description"]
    assert "200" in operation["responses"]
