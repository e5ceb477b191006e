"""Workflows on the in-memory fake backend: cancel, and the API's view of a workflow."""

from __future__ import annotations

import pytest

from scheduling.backends import JobState
from scheduling.backends.fake import FakeBackend
from tests.unit.scheduling.workflows.helpers import (
    DIAMOND,
    task,
)

pytestmark = pytest.mark.django_db


# --- cancel -----------------------------------------------------------------------------------


def test_cancelling_a_workflow_cancels_every_unfinished_task_running_ones_included(flow, api):
    flow.submit(*DIAMOND)
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    flow.finish("b", JobState.RUNNING)
    c_job = flow.task("c").backend_id
    with flow.run():
        response = api.post(f"/api/v1/workflows/{flow.workflow.pk}/cancel/")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert flow.states() == {"a": "succeeded", "b": "cancelled", "c": "cancelled", "d": "cancelled"}
    jobs = FakeBackend.jobs_for("fake")
    assert jobs[flow.task("b").backend_id].state is JobState.CANCELLED  # running: cancelled
    assert jobs[c_job].state is JobState.CANCELLED  # queued: cancelled
    assert flow.jobs("d") == []
    wf = flow.refreshed()
    assert (wf.state, wf.reason) == ("cancelled", "cancelled by alice")
    assert wf.ended_at is not None
    # Again: a no-op, not an error.
    assert api.post(f"/api/v1/workflows/{wf.pk}/cancel/").status_code == 200


def test_cancelling_a_finished_workflow_is_a_conflict(flow, api):
    flow.submit(task("a"))
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    response = api.post(f"/api/v1/workflows/{flow.workflow.pk}/cancel/")
    assert response.status_code == 409
    assert "already ended (succeeded)" in response.json()["errors"][0]["message"]


def test_cancelling_an_aborted_workflow_still_stops_its_other_branches(flow, api):
    flow.submit(task("a"), task("b"))
    flow.finish("a", JobState.FAILED, exit_code=1)
    assert flow.refreshed().state == "failed" and flow.state("b") == "queued"
    with flow.run():
        assert api.post(f"/api/v1/workflows/{flow.workflow.pk}/cancel/").status_code == 200
    assert flow.state("b") == "cancelled"
    assert flow.refreshed().state == "failed"  # it had failed first; that stays the story


@pytest.mark.parametrize(("fail_action", "then"), [("abort", "cancelled"), ("skip", "queued")])
def test_cancelling_one_task_applies_its_fail_action_to_its_dependants(
    flow, api, fail_action, then
):
    flow.submit(task("a", fail_action=fail_action), task("b", "a"))
    with flow.run():
        assert api.post(f"/api/v1/tasks/{flow.task('a').pk}/cancel/").status_code == 202
    assert flow.state("b") == then
    if fail_action == "abort":
        assert "depends on a" in flow.task("b").reason
        assert flow.refreshed().state == "failed"
    else:
        flow.finish("b", JobState.SUCCEEDED, exit_code=0)
        assert flow.refreshed().state == "succeeded"  # a's cancel was forgiven


# --- the API ----------------------------------------------------------------------------------


def test_the_detail_shows_every_task_with_its_dependencies_and_state(flow, api):
    wf = flow.submit(*DIAMOND)
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    body = api.get(f"/api/v1/workflows/{wf.pk}/").json()
    assert (body["name"], body["project"], body["state"]) == ("wf", "materials", "running")
    ids = {t["name"]: t["id"] for t in body["tasks"]}
    shown = {t["name"]: (t["state"], sorted(t["depends_on"])) for t in body["tasks"]}
    assert shown == {
        "a": ("succeeded", []),
        "b": ("queued", [ids["a"]]),
        "c": ("queued", [ids["a"]]),
        "d": ("waiting", sorted([ids["b"], ids["c"]])),
    }
    assert next(t for t in body["tasks"] if t["name"] == "d")["reason"] == "waiting for b, c"
    assert {t["queue"] for t in body["tasks"]} == {"inference-agent"}  # small and short: agent
    listed = api.get("/api/v1/workflows/").json()["results"]
    assert [w["id"] for w in listed] == [wf.pk]
    tasks = api.get(f"/api/v1/tasks/?workflow={wf.pk}").json()["results"]
    assert len(tasks) == 4


def test_an_outsider_gets_404_on_the_workflow_and_its_cancel(flow, outsider_api):
    wf = flow.submit(*DIAMOND)
    assert outsider_api.get(f"/api/v1/workflows/{wf.pk}/").status_code == 404
    assert outsider_api.post(f"/api/v1/workflows/{wf.pk}/cancel/").status_code == 404
    assert outsider_api.get("/api/v1/workflows/").json()["results"] == []
    assert flow.refreshed().state == "running"
