"""What the portal records as it works: submissions and refusals, decision time, dispatch
and start latency, backend calls and their errors (config/metrics/instruments.py)."""

from __future__ import annotations

import json
from unittest import mock

import pytest
from prometheus_client import REGISTRY

from portal.errors import ApplicationError, ErrorItem
from scheduling import engine
from scheduling.backends import BackendUnavailable, JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import get_backend
from scheduling.engine import sandboxes as door
from scheduling.models import Task
from scheduling.services.submit_metrics import refusal_reason
from tests.conftest import descriptor, submit
from tests.unit.scheduling.workflows.helpers import task as flow_task
from tests.unit.scheduling.workflows.helpers import workflow

pytestmark = pytest.mark.django_db
AGENT = {"type": "agent", "queue": "inference-agent"}


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_submission_is_counted_by_type_and_queue_and_its_decision_timed(api):
    before = value("switchyard_tasks_submitted_total", **AGENT)
    decisions = value("switchyard_decision_seconds_count")
    assert submit(api, descriptor()).status_code == 201
    assert value("switchyard_tasks_submitted_total", **AGENT) == before + 1
    assert value("switchyard_decision_seconds_count") == decisions + 1


def test_a_batch_counts_each_task(api):
    before = value("switchyard_tasks_submitted_total", **AGENT)
    body = {"tasks": [descriptor(name=f"t{i}") for i in range(3)]}
    response = api.post(
        "/api/v1/tasks/batch/", data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 201, response.json()
    assert value("switchyard_tasks_submitted_total", **AGENT) == before + 3


def test_a_workflow_counts_each_of_its_tasks_once(api):
    before = value("switchyard_tasks_submitted_total", **AGENT)
    doc = workflow(flow_task("a"), flow_task("b", "a"))
    response = api.post("/api/v1/workflows/", data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 201, response.json()
    assert value("switchyard_tasks_submitted_total", **AGENT) == before + 2


def test_a_refusal_is_counted_by_reason_with_only_the_sites_names_as_labels(api):
    refused = {"type": "", "queue": "", "reason": "queue"}
    before = value("switchyard_tasks_refused_total", **refused)
    response = submit(api, descriptor(queue="no-such-queue-7f3a"))
    assert response.status_code == 400
    assert value("switchyard_tasks_refused_total", **refused) == before + 1
    assert (
        REGISTRY.get_sample_value(
            "switchyard_tasks_refused_total",
            {"type": "", "queue": "no-such-queue-7f3a", "reason": "queue"},
        )
        is None
    )


def test_a_submission_to_a_project_of_someone_else_is_a_project_refusal(api):
    refused = {"type": "", "queue": "", "reason": "project"}
    before = value("switchyard_tasks_refused_total", **refused)
    assert submit(api, descriptor(project="genomics")).status_code == 400
    assert value("switchyard_tasks_refused_total", **refused) == before + 1


def test_nothing_is_recorded_with_metrics_off(api, settings):
    settings.SWITCHYARD_METRICS = False
    before = value("switchyard_tasks_submitted_total", **AGENT)
    decisions = value("switchyard_decision_seconds_count")
    assert submit(api, descriptor()).status_code == 201
    assert value("switchyard_tasks_submitted_total", **AGENT) == before
    assert value("switchyard_decision_seconds_count") == decisions


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ApplicationError("x", field="resources.gpus"), "resources"),
        (ApplicationError("x", errors=[ErrorItem("tasks[12].image", "m", None)]), "image"),
        (ApplicationError("x", errors=[ErrorItem("tasks[3]", "m", None)]), "tasks"),
        (ApplicationError("x", field="resources.gpus", status=409), "quota_full"),
        (ApplicationError("x", field="tasks[0].priority", status=409), "priority"),
        (ApplicationError("x", field="image", status=503), "unavailable"),
        (ApplicationError("x", field="whatever.a-client.wrote"), "other"),
        (ApplicationError("x"), "other"),
    ],
)
def test_the_refusal_reason_is_one_of_a_few_names(error, reason):
    assert refusal_reason(error) == reason


def test_dispatch_and_start_latency_are_observed_once_by_type_and_backend(api):
    labels = {"type": "agent", "backend": "fake"}
    dispatched = value("switchyard_dispatch_latency_seconds_count", **labels)
    started = value("switchyard_start_latency_seconds_count", **labels)
    task = Task.objects.get(pk=submit(api, descriptor()).json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted"
    assert value("switchyard_dispatch_latency_seconds_count", **labels) == dispatched + 1
    task.refresh_from_db()
    get_backend("fake").finish(task.backend_id, JobState.RUNNING)
    engine.backend_poll("fake")
    engine.backend_poll("fake")
    assert Task.objects.get(pk=task.pk).state == "running"
    assert value("switchyard_start_latency_seconds_count", **labels) == started + 1
    assert value("switchyard_dispatch_latency_seconds_count", **labels) == dispatched + 1


def test_backend_calls_are_timed_and_their_failures_counted(site):
    backend = get_backend("fake")
    calls = value("switchyard_backend_call_seconds_count", backend="fake", operation="poll")
    backend.poll([])
    assert (
        value("switchyard_backend_call_seconds_count", backend="fake", operation="poll")
        == calls + 1
    )
    errors = {"backend": "fake", "operation": "poll", "error": "unavailable"}
    before = value("switchyard_backend_errors_total", **errors)

    # Patched on the class, as tests patch backends: the timed call still reaches the patch.
    down = BackendUnavailable("the scheduler does not answer")
    with (
        mock.patch.object(FakeBackend, "poll", autospec=True, side_effect=down),
        pytest.raises(BackendUnavailable),
    ):
        backend.poll([])
    assert value("switchyard_backend_errors_total", **errors) == before + 1


def test_the_warm_pass_reports_the_ready_sandboxes_of_each_backend(site):
    assert door.warm_pass() == {"fake": 2}  # the default site keeps {"": 2} warm
    assert value("switchyard_sandbox_warm", backend="fake", state="ready") == 2
    assert value("switchyard_sandbox_warm", backend="fake", state="starting") == 0
