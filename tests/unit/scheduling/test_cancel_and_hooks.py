"""Cancels are requests a worker carries out; attempt ends reach the registered hooks once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import engine, hooks, outbox, services
from scheduling.backends import BackendUnavailable, JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import get_backend
from scheduling.models import Task, Workflow
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db


def _running(api, **overrides) -> Task:
    response = submit(api, descriptor(**overrides))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    get_backend("fake").finish(task.backend_id, JobState.RUNNING)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "running"
    return task


@pytest.fixture
def ended_attempts(monkeypatch):
    seen = []
    monkeypatch.setattr(hooks, "_attempt_end", [])
    hooks.on_attempt_end(lambda attempts: seen.extend((a.task_id, a.number) for a in attempts))
    return seen


def test_an_attempt_end_reaches_the_hooks_once_however_often_it_is_polled(api, ended_attempts):
    task = _running(api)
    get_backend("fake").finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)
    engine.backend_poll("fake")
    engine.apply_job(task, FakeBackend.jobs_for("fake")[task.backend_id])  # a replayed poll
    engine.backend_poll("fake")
    assert ended_attempts == [(task.pk, 1)]


def test_the_jobs_that_end_in_one_poll_reach_each_hook_once_together(api, monkeypatch):
    calls: list[tuple[str, list[int]]] = []
    monkeypatch.setattr(hooks, "_attempt_end", [])
    monkeypatch.setattr(hooks, "_task_end", [])
    hooks.on_attempt_end(lambda attempts: calls.append(("attempts", [a.task_id for a in attempts])))
    hooks.on_task_end(lambda tasks: calls.append(("tasks", [t.pk for t in tasks])))
    tasks = [_running(api) for _ in range(3)]
    for task in tasks:
        get_backend("fake").finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)
    assert engine.backend_poll("fake") == 3
    ids = sorted(t.pk for t in tasks)
    assert calls == [("attempts", ids), ("tasks", ids)]


def test_a_gathered_block_calls_the_hooks_even_when_it_fails(api, monkeypatch):
    seen: list[int] = []
    monkeypatch.setattr(hooks, "_task_end", [])
    hooks.on_task_end(lambda tasks: seen.extend(t.pk for t in tasks))
    task = _running(api)
    with pytest.raises(RuntimeError), hooks.gathered():
        services.task_cancel(user=task.owner, task=task)
        engine.cancel_requested([task.pk])
        assert seen == [], "inside the block the end is only collected"
        raise RuntimeError("the poll failed after the end was stored")
    assert seen == [task.pk]
    hooks.task_ended(task)  # outside a block: at once
    assert seen == [task.pk, task.pk]


def test_a_retried_attempt_and_the_last_one_each_reach_the_hooks(api, ended_attempts, settings):
    settings.SWITCHYARD_RETRY_BACKOFF_SECONDS = 0
    task = _running(api, retry_count=1)
    get_backend("fake").finish(task.backend_id, JobState.FAILED, exit_code=1)
    engine.backend_poll("fake")
    assert engine.task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    get_backend("fake").finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)
    engine.backend_poll("fake")
    assert ended_attempts == [(task.pk, 1), (task.pk, 2)]


def test_a_cancelled_attempt_reaches_the_hooks(api, researcher, ended_attempts):
    task = _running(api)
    services.task_cancel(user=researcher, task=task)
    engine.cancel_requested([task.pk])
    engine.backend_poll("fake")  # nothing left to follow: the task has ended
    assert ended_attempts == [(task.pk, 1)]


def test_a_waiting_or_pending_task_is_cancelled_at_once_without_a_worker(api, researcher):
    response = submit(api, descriptor())
    task = Task.objects.get(pk=response.json()["id"])
    response = api.post(f"/api/v1/tasks/{task.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled" and response.json()["cancelling"] is False


def test_the_api_answers_202_while_a_worker_cancels_the_job(api):
    task = _running(api)
    response = api.post(f"/api/v1/tasks/{task.pk}/cancel/")
    assert response.status_code == 202
    assert (response.json()["state"], response.json()["cancelling"]) == ("running", True)
    assert response.json()["reason"] == "cancelling: asked by alice"
    # Asking again adds nothing: one request, one event.
    assert api.post(f"/api/v1/tasks/{task.pk}/cancel/").status_code == 202
    assert task.events.filter(message="cancelling: asked by alice").count() == 1
    # A poll meanwhile keeps "cancelling" as the reason.
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.reason == "cancelling: asked by alice"


def test_an_unreachable_backend_keeps_the_request_and_the_task_is_retried(
    api, researcher, monkeypatch
):
    task = _running(api)
    services.task_cancel(user=researcher, task=task)

    def down(backend_id):
        raise BackendUnavailable("connection refused")

    monkeypatch.setattr(get_backend("fake"), "cancel", down)
    with pytest.raises(engine.CancelRetry) as caught:
        engine.cancel_requested([task.pk])
    assert caught.value.task_ids == [task.pk]
    task.refresh_from_db()
    assert task.cancelling and "scheduler unreachable" in task.reason
    monkeypatch.undo()
    assert engine.cancel_requested([task.pk]) == 1
    assert Task.objects.get(pk=task.pk).state == "cancelled"


def test_a_lost_cancel_message_is_found_by_the_sweep(api, researcher, settings):
    settings.SWITCHYARD_PENDING_GRACE_SECONDS = 10
    task = _running(api)
    services.task_cancel(user=researcher, task=task)  # its message is never delivered
    assert engine.sweep_cancels() == []  # still within the grace period
    Task.objects.filter(pk=task.pk).update(
        cancel_requested_at=timezone.now() - timedelta(seconds=11)
    )
    assert engine.sweep_cancels() == [task.pk]
    engine.cancel_requested(engine.sweep_cancels())
    assert engine.sweep_cancels() == []
    assert Task.objects.get(pk=task.pk).state == "cancelled"


def test_a_job_that_fails_while_being_cancelled_is_not_retried(api, researcher):
    task = _running(api, retry_count=3)
    services.task_cancel(user=researcher, task=task)
    get_backend("fake").finish(task.backend_id, JobState.FAILED, exit_code=143)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert (task.state, task.attempts) == ("failed", 1)


def test_a_workflow_cancel_is_one_message_for_all_its_jobs(
    api, researcher, django_capture_on_commit_callbacks, monkeypatch
):
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wide",
        "project": "materials",
        "tasks": [
            {"name": f"t{i}", "command": ["true"], "walltime": "10m", "resources": {"cpus": 1}}
            for i in range(5)
        ]
        + [{"name": "last", "command": ["true"], "depends_on": [f"t{i}" for i in range(5)]}],
    }
    response = api.post("/api/v1/workflows/", doc, format="json")
    assert response.status_code == 201, response.json()
    workflow = Workflow.objects.get(pk=response.json()["id"])
    for task in workflow.tasks.filter(state="pending"):
        engine.task_dispatch(task.pk)
    sent = []
    monkeypatch.setattr(outbox, "send", lambda name, args, **kw: sent.append((name, args)))
    calls_before = len(get_backend("fake").calls)
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"/api/v1/workflows/{workflow.pk}/cancel/")
    assert response.status_code == 200
    assert len(get_backend("fake").calls) == calls_before  # no backend call in the request
    last = workflow.tasks.get(name="last")
    assert last.state == "cancelled"  # it had no job: at once
    # One message for the five jobs' cancels, one for the end hooks of what ended here.
    assert sorted(name for name, _ in sent) == sorted([outbox.CANCEL, outbox.TASKS_ENDED])
    [ids] = [args[0] for name, args in sent if name == outbox.CANCEL]
    assert len(ids) == 5
    assert (outbox.TASKS_ENDED, ([last.pk],)) in sent
    engine.cancel_requested(ids)
    assert set(workflow.tasks.values_list("state", flat=True)) == {"cancelled"}


def test_housekeeping_asks_each_backend_the_pools_use(site, monkeypatch):
    from scheduling.backends.fake import FakeBackend

    asked = []
    monkeypatch.setattr(
        FakeBackend, "housekeep", lambda self: asked.append(self.alias) or 2, raising=False
    )
    assert engine.housekeep() == 2
    assert asked == ["fake"]
