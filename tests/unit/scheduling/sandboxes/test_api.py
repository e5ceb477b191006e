"""The live-sandbox API on the fake backend (its sessions keep files in memory)."""

from __future__ import annotations

import json
import time

import pytest
from django.test import Client

from scheduling.backends.base import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import sandboxes as door
from scheduling.models import Sandbox, SandboxExec, Task
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


def test_a_sandbox_is_created_ready_and_runs_commands_that_build_on_its_files(api):
    made = create(api)
    assert made.status_code == 201, made.content
    sid = made.json()["id"]
    assert made.json()["state"] == "ready" and sid.startswith("sbx-")
    put = api.put(
        f"/api/v1/sandboxes/{sid}/files/notes.txt",
        data=b"first\n",
        content_type="application/octet-stream",
    )
    assert put.status_code == 200, put.content
    done = run(api, sid, ["cat", "notes.txt"])
    assert done.status_code == 200, done.content
    assert done.json()["stdout"] == "first\n" and done.json()["exit_code"] == 0
    got = api.get(f"/api/v1/sandboxes/{sid}/files/notes.txt")
    assert got.content == b"first\n"
    task = Task.objects.get(sandbox__public_id=sid)
    assert task.type == "sandbox" and task.spec["session_idle_s"] == 120
    assert SandboxExec.objects.get().exit_code == 0
    ended = api.delete(f"/api/v1/sandboxes/{sid}/")
    assert ended.status_code == 200 and ended.json()["state"] == "ended", ended.content
    task.refresh_from_db()
    assert task.state == "cancelled"
    assert Sandbox.objects.get().end_reason == "deleted"
    assert run(api, sid, ["true"]).status_code == 409


def test_another_project_gets_404_everywhere(api, outsider_api, outsider):
    sid = create(api).json()["id"]
    api.put(f"/api/v1/sandboxes/{sid}/files/x", data=b"secret", content_type="text/plain")
    browser = Client()
    browser.force_login(outsider)
    for response in (
        outsider_api.get(f"/api/v1/sandboxes/{sid}/"),
        run(outsider_api, sid, ["true"]),
        outsider_api.post(
            f"/api/v1/sandboxes/{sid}/exec/?stream=1",
            data=json.dumps({"command": ["cat", "x"]}),
            content_type="application/json",
        ),
        outsider_api.get(f"/api/v1/sandboxes/{sid}/files/x"),
        outsider_api.put(f"/api/v1/sandboxes/{sid}/files/x", data=b"", content_type="text/plain"),
        outsider_api.delete(f"/api/v1/sandboxes/{sid}/"),
        browser.get(f"/sandboxes/{sid}/"),
        browser.post(f"/sandboxes/{sid}/end/"),
    ):
        assert response.status_code == 404, response.content
    assert sid not in browser.get("/sandboxes/").content.decode()
    assert run(api, sid, ["cat", "x"]).json()["stdout"] == "secret"
    assert outsider_api.get("/api/v1/sandboxes/").json()["results"] == []
    assert FakeBackend.jobs_for("fake")  # it is still there
    assert Sandbox.objects.get().state == "ready"


def test_on_a_backend_that_starts_it_later_the_create_answers_starting_and_a_read_sees_it_ready(
    api,
):
    # The fake backend shows no starts at once, as Slurm: the client polls.
    FakeBackend(alias="fake").hold_sessions()
    made = create(api)
    assert made.status_code == 202 and made.json()["state"] == "starting", made.content
    sid = made.json()["id"]
    assert run(api, sid, ["true"]).status_code == 409
    task = Task.objects.get(sandbox__public_id=sid)
    FakeBackend(alias="fake").finish(task.backend_id, JobState.RUNNING)
    time.sleep(door.ASK_BACKEND_EVERY_S)  # the exec above asked the backend just now
    shown = api.get(f"/api/v1/sandboxes/{sid}/").json()
    assert shown["state"] == "ready" and shown["ready_at"] is not None
    assert run(api, sid, ["echo", "up"]).json()["stdout"] == "up\n"


def test_reads_of_a_starting_sandbox_ask_its_backend_a_few_times_a_second_not_each(api):
    FakeBackend(alias="fake").hold_sessions()
    sid = create(api).json()["id"]
    fake = FakeBackend(alias="fake")
    before = sum(1 for method, _ in fake.calls if method == "poll")
    started = time.monotonic()
    for _ in range(20):
        assert api.get(f"/api/v1/sandboxes/{sid}/").json()["state"] == "starting"
        assert run(api, sid, ["true"]).status_code == 409
    took = time.monotonic() - started
    polls = sum(1 for method, _ in fake.calls if method == "poll") - before
    assert 1 <= polls <= 1 + took / door.ASK_BACKEND_EVERY_S


def test_an_exec_in_a_sandbox_the_backend_ended_is_409_and_recorded(api):
    sid = create(api).json()["id"]
    task = Task.objects.get(sandbox__public_id=sid)
    FakeBackend(alias="fake").cancel(task.backend_id)  # ended behind the portal's back
    gone = run(api, sid, ["true"])
    assert gone.status_code == 409 and "has ended" in gone.json()["errors"][0]["message"]
    row = SandboxExec.objects.get()
    assert row.ended_at is not None and "ended" in row.error
