"""Workflows refused at the API: each problem named, nothing stored."""

from __future__ import annotations

import json

import pytest

from scheduling import engine, services
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.models import Task, Workflow
from tests.conftest import descriptor
from tests.unit.scheduling.workflows.helpers import (
    _post,
    task,
    workflow,
)

pytestmark = pytest.mark.django_db


# --- refused workflows ------------------------------------------------------------------------


def _many_tasks(count: int) -> str:
    tasks = [{"name": f"t{i}", "command": ["true"]} for i in range(count)]
    return json.dumps(workflow(*tasks), separators=(",", ":"))


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        (workflow(task("a", "b"), task("b", "a")), "tasks", "cycle: a → b → a"),
        (workflow(task("a"), task("b", "nope")), "tasks[1].depends_on[0]", "no task named 'nope'"),
        (workflow(task("a"), task("a")), "tasks[1].name", "duplicate task name 'a'"),
        (workflow(task("a", "a")), "tasks[0].depends_on[0]", "cannot depend on itself"),
        (_many_tasks(10_000), None, "the limit is"),
    ],
    ids=["cycle", "unknown", "duplicate", "self", "10000-tasks"],
)
def test_a_bad_workflow_is_a_400_naming_the_problem_and_stores_nothing(api, doc, field, words):
    response = _post(api, doc)
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert any(e["field"] == field and words in e["message"] for e in errors), errors
    assert Task.objects.count() == Workflow.objects.count() == 0


def test_ten_thousand_tasks_under_a_raised_byte_limit_are_refused_by_count(api, settings):
    settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES = 4 << 20
    response = _post(api, _many_tasks(10_000))
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "tasks", "message": "must have at most 1000 tasks, got 10000", "got": None}
    ]
    assert Task.objects.count() == Workflow.objects.count() == 0


def test_a_dependency_on_another_users_task_is_refused_like_a_missing_one(api, outsider):
    theirs = services.task_submit(
        user=outsider, text=json.dumps(descriptor(project="genomics")), fmt="json"
    )
    response = _post(api, workflow(task("a"), task("b", "a", theirs.pk)))
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "tasks[1].depends_on" and error["got"] == theirs.pk
    assert f"no task #{theirs.pk}" in error["message"]
    assert Workflow.objects.count() == 0 and Task.objects.count() == 1  # theirs only


def test_a_task_error_and_a_bad_dependency_id_are_reported_together(api):
    doc = workflow(task("a", 999_999, resources={"cpus": 100_000}))
    fields = [e["field"] for e in _post(api, doc).json()["errors"]]
    assert fields == ["tasks[0].resources.cpus", "tasks[0].depends_on"]
    assert Task.objects.count() == 0


def test_a_task_kind_sent_to_the_workflow_endpoint_says_where_it_goes(api):
    response = _post(api, descriptor())
    assert response.status_code == 400
    assert "/api/v1/tasks/" in response.json()["errors"][0]["message"]


def test_a_dependency_on_a_task_the_user_may_see_works(flow, api, researcher):
    mine = services.task_submit(user=researcher, text=json.dumps(descriptor()), fmt="json")
    with flow.run():
        engine.task_dispatch(mine.pk)
    mine.refresh_from_db()
    flow.submit(task("a"), task("b", "a", mine.pk))
    detail = api.get(f"/api/v1/workflows/{flow.workflow.pk}/").json()
    b = next(t for t in detail["tasks"] if t["name"] == "b")
    assert sorted(b["depends_on"]) == sorted([flow.task("a").pk, mine.pk])

    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    assert flow.task("b").reason == "waiting for t1"  # the outside task, by name
    get_backend("fake").finish(mine.backend_id, JobState.SUCCEEDED, exit_code=0)
    with flow.run():
        engine.backend_poll("fake")
    assert flow.state("b") == "queued"
