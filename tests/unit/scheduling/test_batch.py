"""POST /api/v1/tasks/batch/: a parameter sweep in one request, all or nothing."""

from __future__ import annotations

import json

import pytest

from scheduling import engine
from scheduling.backends.fake import FakeBackend
from scheduling.models import Task, TaskEvent
from tests.conftest import descriptor

pytestmark = pytest.mark.django_db


def post(client, body) -> object:
    return client.post(
        "/api/v1/tasks/batch/", data=json.dumps(body), content_type="application/json"
    )


def test_a_batch_stores_every_task_with_its_decision_and_event(
    api, django_capture_on_commit_callbacks
):
    docs = [descriptor(name=f"sweep-{i}", env={"ALPHA": str(i)}) for i in range(50)]
    with django_capture_on_commit_callbacks() as callbacks:
        response = post(api, {"tasks": docs})
    assert response.status_code == 201, response.json()
    ids = response.json()["ids"]
    assert response.json()["count"] == len(ids) == 50
    assert len(callbacks) == 1  # one message dispatches the whole batch
    tasks = Task.objects.filter(pk__in=ids)
    assert {t.queue.name for t in tasks} == {"inference-agent"}
    assert all(t.state == "pending" and t.classify_reason for t in tasks)
    assert TaskEvent.objects.filter(task__in=tasks, to_state="pending").count() == 50
    first = TaskEvent.objects.filter(task__in=tasks).earliest("pk")
    assert first.at == first.task.submitted_at
    assert first.message == (
        f"submitted by alice in a batch of 50; {first.task.classify_reason}; "
        f"{first.task.routing_reason}"
    )
    for task_id in ids:
        engine.task_dispatch(task_id)
    assert len(FakeBackend.jobs_for("fake")) == 50


def test_one_bad_descriptor_refuses_the_whole_batch_naming_its_index(api):
    docs = [
        descriptor(name="ok"),
        descriptor(name="bad", resources={"cpus": "eight"}),
        descriptor(name="wall", type="hpc-simulation", walltime="100h"),
    ]
    response = post(api, {"tasks": docs})
    assert response.status_code == 400
    fields = [e["field"] for e in response.json()["errors"]]
    assert "tasks[1].resources.cpus" in fields and "tasks[2].walltime" in fields
    assert Task.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"tasks": []}, "tasks"),
        ({"task": [descriptor()]}, "tasks"),
        ({"tasks": [descriptor(project="genomics")]}, "tasks[0].project"),
        ({"tasks": [descriptor(depends_on=[1])]}, "tasks[0]"),
    ],
)
def test_malformed_batches_are_refused(api, body, field):
    response = post(api, body)
    assert response.status_code == 400
    assert field in [e["field"] for e in response.json()["errors"]]
    assert Task.objects.count() == 0


def test_too_many_tasks_are_refused(api, settings):
    settings.SWITCHYARD_BATCH_MAX_TASKS = 3
    response = post(api, {"tasks": [descriptor(name=f"t{i}") for i in range(4)]})
    assert response.status_code == 400 and response.json()["errors"][0]["got"] == 4


def test_an_oversized_batch_is_refused_before_it_is_read(api, settings):
    settings.SWITCHYARD_BATCH_MAX_BYTES = 1000
    response = post(api, {"tasks": [descriptor(name=f"t{i}") for i in range(20)]})
    assert response.status_code == 400
    assert "limit is 1000" in response.json()["errors"][0]["message"]
    assert Task.objects.count() == 0
