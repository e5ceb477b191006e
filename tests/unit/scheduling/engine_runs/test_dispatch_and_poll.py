"""The engine against the in-memory fake backend: dispatch, poll, retries, sweep, cancel."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import engine, services
from scheduling.backends import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import dispatch, get_backend
from scheduling.models import Attempt, Task
from tests.unit.scheduling.engine_runs.helpers import (
    _states,
    _submit,
)

pytestmark = pytest.mark.django_db


def test_dispatch_is_enqueued_on_commit(api, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        _submit(api)
    assert len(callbacks) == 1


def test_dispatch_twice_makes_one_backend_job(api):
    task = _submit(api)
    assert engine.task_dispatch(task.pk) == "submitted"
    assert engine.task_dispatch(task.pk) == "not-claimed"
    assert len(FakeBackend.jobs_for("fake")) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts, task.backend_id) == ("queued", 1, task.key)


def test_a_crash_after_submit_is_adopted_not_resubmitted(api):
    from scheduling.backends import SubmitRequest
    from scheduling.models import attempt_key
    from scheduling.selectors import site_view
    from scheduling.spec import TaskSpec

    task = _submit(api)
    backend = get_backend("fake")
    # The first dispatcher claims the task and submits, then dies before it records anything.
    assert dispatch.claim_many([task.pk]) == [task.pk]
    backend.submit(
        SubmitRequest(
            key=attempt_key(task.pk, 1, task.key_salt),
            spec=TaskSpec.from_dict(task.spec),
            type=task.type,
            queue=site_view().queues[task.queue.name],
            project="materials",
            user="alice",
        )
    )
    assert engine.task_dispatch(task.pk) == "not-claimed"  # its lease still holds
    Task.objects.filter(pk=task.pk).update(dispatch_lease_until=timezone.now())
    assert engine.task_dispatch(task.pk) == "submitted"
    methods = [c[0] for c in backend.calls]
    assert methods.count("submit") == 1 and "find" in methods
    assert len(FakeBackend.jobs_for("fake")) == 1
    task.refresh_from_db()
    assert (task.state, task.attempts, task.dispatch_claims) == ("queued", 1, 0)


def test_the_first_dispatch_of_an_attempt_skips_the_lookup(api):
    task = _submit(api)
    engine.task_dispatch(task.pk)
    methods = [c[0] for c in get_backend("fake").calls]
    assert methods == ["submit"]


def test_poll_follows_the_job_to_success_with_one_call(api):
    tasks = [_submit(api, name=f"t{i}") for i in range(3)]
    for task in tasks:
        engine.task_dispatch(task.pk)
    backend = get_backend("fake")
    for task in tasks:
        task.refresh_from_db()
        backend.finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)
    before = [c[0] for c in backend.calls].count("poll")
    assert engine.backend_poll("fake") == 3
    assert [c[0] for c in backend.calls].count("poll") == before + 1
    for task in tasks:
        task.refresh_from_db()
        assert task.state == "succeeded" and task.exit_code == 0 and task.ended_at


def test_a_failed_attempt_with_retries_left_goes_back_to_pending_then_fails(api):
    task = _submit(api, retry_count=1)
    backend = get_backend("fake")
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    backend.finish(task.backend_id, JobState.FAILED, exit_code=3)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "pending" and "attempt 1 failed" in task.reason
    assert engine.task_dispatch(task.pk) == "not-claimed"  # backing off
    Task.objects.filter(pk=task.pk).update(not_before=timezone.now())
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    assert task.attempts == 2 and task.backend_id.endswith("-2")
    backend.finish(task.backend_id, JobState.FAILED, exit_code=4)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert (task.state, task.exit_code) == ("failed", 4)
    assert [a.exit_code for a in task.attempt_set.all()] == [3, 4]
    # terminal is final: nothing moves it again
    backend.finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "failed"


def test_jobs_that_end_in_one_poll_are_recorded_together_each_as_its_end_says(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling import hooks

    ok, failed, skipped, retried, cancelled = (
        _submit(api, name="ok"),
        _submit(api, name="failed"),
        _submit(api, name="skipped", fail_action="skip"),
        _submit(api, name="retried", retry_count=1),
        _submit(api, name="cancelled"),
    )
    tasks = [ok, failed, skipped, retried, cancelled]
    for task in tasks:
        engine.task_dispatch(task.pk)
        task.refresh_from_db()
    backend = get_backend("fake")
    ends = [
        (JobState.SUCCEEDED, 0),
        (JobState.FAILED, 3),
        (JobState.FAILED, 4),
        (JobState.FAILED, 5),
        (JobState.CANCELLED, None),
    ]
    for task, (state, code) in zip(tasks, ends, strict=True):
        backend.finish(task.backend_id, state, exit_code=code)
    seen: list[list[int]] = []
    hook = hooks.on_task_end(lambda ended: seen.append(sorted(t.pk for t in ended)))
    try:
        assert engine.backend_poll("fake") == 5
    finally:
        hooks._task_end.remove(hook)
    rows = {t.pk: t for t in Task.objects.filter(pk__in=[t.pk for t in tasks])}
    assert [(rows[t.pk].state, rows[t.pk].exit_code) for t in tasks] == [
        ("succeeded", 0),
        ("failed", 3),
        ("skipped", 4),
        ("pending", 5),  # its retry
        ("cancelled", None),
    ]
    assert "attempt 1 failed" in rows[retried.pk].reason
    attempts = {a.task_id: a for a in Attempt.objects.filter(task__in=tasks)}
    assert [(attempts[t.pk].state, attempts[t.pk].exit_code) for t in tasks] == [
        ("succeeded", 0),
        ("failed", 3),
        ("failed", 4),
        ("failed", 5),
        ("cancelled", None),
    ]
    assert all(a.ended_at is not None for a in attempts.values())
    # The task-end hooks once, with the four that ended (not the retried one).
    assert seen == [sorted(t.pk for t in (ok, failed, skipped, cancelled))]
    assert [_states(rows[t.pk])[-1] for t in tasks] == [
        "succeeded",
        "failed",
        "skipped",
        "pending",
        "cancelled",
    ]
    with CaptureQueriesContext(connection) as replay:
        assert engine.backend_poll("fake") == 0  # nothing new: nothing written twice
    assert not [q for q in replay.captured_queries if q["sql"].startswith(("UPDATE", "INSERT"))]


def test_ending_many_jobs_takes_the_queries_ending_two_does(api):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def ending(n: int) -> int:
        tasks = [_submit(api, name=f"e{n}-{i}") for i in range(n)]
        for task in tasks:
            engine.task_dispatch(task.pk)
            task.refresh_from_db()
            get_backend("fake").finish(task.backend_id, JobState.SUCCEEDED, exit_code=0)
        with CaptureQueriesContext(connection) as queries:
            assert engine.backend_poll("fake") == n
        return len(queries)

    assert ending(8) == ending(2)


def test_every_transition_writes_an_event(api):
    task = _submit(api)
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    backend = get_backend("fake")
    backend.finish(task.backend_id, JobState.RUNNING)
    engine.backend_poll("fake")
    backend.finish(task.backend_id, JobState.TIMEOUT)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert _states(task) == ["pending", "queued", "running", "timeout"]


def test_a_dispatch_lost_between_commit_and_publish_is_found_by_the_sweep_once(
    api, django_capture_on_commit_callbacks, settings
):
    # The commit happens; the on-commit publish never runs (the process died right there).
    with django_capture_on_commit_callbacks(execute=False):
        task = _submit(api)
    assert engine.sweep_pending() == []  # still inside the grace period
    Task.objects.filter(pk=task.pk).update(updated_at=timezone.now() - timedelta(minutes=5))
    assert engine.sweep_pending() == [task.pk]
    for task_id in engine.sweep_pending() + engine.sweep_pending():  # two sweeps race
        engine.task_dispatch(task_id)
    assert len(FakeBackend.jobs_for("fake")) == 1
    task.refresh_from_db()
    assert task.state == "queued"


def test_cancel_of_a_queued_task_cancels_the_backend_job(
    api, researcher, django_capture_on_commit_callbacks
):
    task = _submit(api)
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    with django_capture_on_commit_callbacks() as published:
        services.task_cancel(user=researcher, task=task)
    # The request only records the cancel: no backend is called inside a web request.
    assert FakeBackend.jobs_for("fake")[task.backend_id].state is JobState.PENDING
    task.refresh_from_db()
    assert task.state == "queued" and task.cancelling and task.display_state == "cancelling"
    assert len(published) == 1  # one message for the worker
    assert engine.cancel_requested([task.pk]) == 1  # what the worker does with it
    assert FakeBackend.jobs_for("fake")[task.backend_id].state is JobState.CANCELLED
    task.refresh_from_db()
    assert task.state == "cancelled" and task.reason == "cancelled by alice"
    assert Attempt.objects.get(task=task).state == "cancelled"
    assert engine.cancel_requested([task.pk]) == 0  # a redelivered message changes nothing


def test_a_task_cancelled_while_being_submitted_does_not_leave_a_job_running(
    api, researcher, monkeypatch
):
    task = _submit(api)
    backend = get_backend("fake")  # the instance the dispatcher uses
    original_submit_many = backend.submit_many

    def submit_then_user_cancels(requests):
        jobs = original_submit_many(requests)
        services.task_cancel(user=researcher, task=Task.objects.get(pk=task.pk))
        return jobs

    monkeypatch.setattr(backend, "submit_many", submit_then_user_cancels)
    assert engine.task_dispatch(task.pk) == "lost-race"
    [job] = FakeBackend.jobs_for("fake").values()
    assert job.state is JobState.CANCELLED


def test_an_unreachable_backend_is_the_reason_until_a_poll_reaches_it_again(api, monkeypatch):
    from scheduling.backends import BackendUnavailable

    task = _submit(api)
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    backend = get_backend("fake")
    backend.finish(task.backend_id, JobState.RUNNING)
    engine.backend_poll("fake")

    def down(backend_ids):
        raise BackendUnavailable("connection refused")

    monkeypatch.setattr(backend, "poll", down)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "running" and task.reason.startswith("scheduler unreachable")

    monkeypatch.undo()
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert (task.state, task.reason) == ("running", "")
