"""The live-sandbox API on the fake backend (its sessions keep files in memory)."""

from __future__ import annotations

import pytest

from scheduling.backends.fake import FakeBackend
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


def test_another_project_gets_404_everywhere(api, outsider_api):
    sid = create(api).json()["id"]
    for response in (
        outsider_api.get(f"/api/v1/sandboxes/{sid}/"),
        run(outsider_api, sid, ["true"]),
        outsider_api.get(f"/api/v1/sandboxes/{sid}/files/x"),
        outsider_api.delete(f"/api/v1/sandboxes/{sid}/"),
    ):
        assert response.status_code == 404, response.content
    assert outsider_api.get("/api/v1/sandboxes/").json()["results"] == []
    assert FakeBackend.jobs_for("fake")  # it is still there
    assert Sandbox.objects.get().state == "ready"
