"""Workflows on the in-memory fake backend: release, retries and wait timeouts."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling import engine
from scheduling.backends import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import settle
from tests.unit.scheduling.workflows.helpers import (
    DIAMOND,
    _events,
    task,
)

pytestmark = pytest.mark.django_db


# --- release ----------------------------------------------------------------------------------


def test_diamond_releases_d_only_after_both_b_and_c(flow):
    wf = flow.submit(*DIAMOND)
    assert flow.states() == {"a": "queued", "b": "waiting", "c": "waiting", "d": "waiting"}
    assert flow.task("d").reason == "waiting for b, c"
    assert flow.task("b").reason == "waiting for a"
    assert flow.jobs("b") == flow.jobs("c") == flow.jobs("d") == []  # waiting holds nothing

    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    assert flow.states() == {"a": "succeeded", "b": "queued", "c": "queued", "d": "waiting"}

    flow.finish("b", JobState.SUCCEEDED, exit_code=0)
    assert flow.state("d") == "waiting" and flow.task("d").reason == "waiting for c"
    assert flow.jobs("d") == []  # not released on one of its two dependencies

    flow.finish("c", JobState.SUCCEEDED, exit_code=0)
    d = flow.task("d")
    assert d.state == "queued" and len(flow.jobs("d")) == 1
    assert _events(d) == [("", "waiting"), ("waiting", "pending"), ("pending", "queued")]
    released = d.events.get(to_state="pending")
    assert "released: dependencies done" in released.message
    for name in ("b", "c"):
        assert flow.task(name).events.get(to_state="succeeded").at <= released.at

    assert flow.refreshed().state == "running"
    flow.finish("d", JobState.SUCCEEDED, exit_code=0)
    wf = flow.refreshed()
    assert (wf.state, wf.reason) == ("succeeded", "every task succeeded or was skipped")
    assert wf.ended_at is not None


def test_a_released_step_is_ready_from_its_release_so_its_level_clock_runs(flow):
    flow.submit(task("a"), task("b", "a"))
    assert flow.task("b").ready_at is None  # waiting on a: not ready, no clock
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    b = flow.task("b")
    released = b.events.get(to_state="pending")
    assert b.ready_at is not None
    assert abs((b.ready_at - released.at).total_seconds()) < 5
    assert b.ready_at > flow.task("a").submitted_at


def test_b_failing_with_skip_lets_d_run_and_the_workflow_succeeds(flow):
    flow.submit(task("a"), task("b", "a", fail_action="skip"), task("c", "a"), task("d", "b", "c"))
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    b = flow.finish("b", JobState.FAILED, exit_code=3)
    assert b.state == "skipped" and "skipped (fail_action: skip)" in b.reason
    assert b.exit_code == 3
    assert flow.state("d") == "waiting"  # c is still running
    flow.finish("c", JobState.SUCCEEDED, exit_code=0)
    assert flow.state("d") == "queued"
    flow.finish("d", JobState.SUCCEEDED, exit_code=0)
    assert flow.refreshed().state == "succeeded"


def test_b_failing_with_abort_cancels_d_and_fails_the_workflow(flow):
    flow.submit(*DIAMOND)
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    b = flow.finish("b", JobState.FAILED, exit_code=3)
    assert b.state == "failed"
    d = flow.task("d")
    assert d.state == "cancelled"
    assert d.reason == f"not run: it depends on b (#{b.pk}), which ended failed"
    assert flow.jobs("d") == []
    wf = flow.refreshed()
    assert wf.state == "failed" and "task b ended failed" in wf.reason
    assert wf.ended_at is None  # c still runs
    assert flow.state("c") == "queued"
    flow.finish("c", JobState.SUCCEEDED, exit_code=0)
    wf = flow.refreshed()
    assert wf.state == "failed" and wf.ended_at is not None


def test_an_abort_cancels_everything_downstream_even_through_a_skip_task(flow):
    # b would be forgiven if it failed itself; it never ran, so c must not run either.
    flow.submit(task("a"), task("b", "a", fail_action="skip"), task("c", "b"))
    flow.finish("a", JobState.FAILED, exit_code=1)
    assert flow.states() == {"a": "failed", "b": "cancelled", "c": "cancelled"}
    assert "depends on b" in flow.task("c").reason
    assert flow.refreshed().state == "failed"


def test_a_timeout_with_skip_is_skipped_too(flow):
    flow.submit(task("a", fail_action="skip"), task("b", "a"))
    flow.finish("a", JobState.TIMEOUT)
    assert flow.state("a") == "skipped" and flow.state("b") == "queued"


# --- retries ----------------------------------------------------------------------------------


def test_two_failed_attempts_then_a_success_end_succeeded_with_three_attempts(flow, api, settings):
    settings.SWITCHYARD_RETRY_BACKOFF_SECONDS = 1.0
    flow.submit(task("flaky", retry_count=2))
    first = flow.task("flaky").backend_id
    before = timezone.now()
    t = flow.finish("flaky", JobState.FAILED, exit_code=1)
    assert t.state == "pending" and "attempt 1 failed" in t.reason and "retrying in 1s" in t.reason
    assert t.not_before >= before + timedelta(seconds=1)
    assert flow.retry_now("flaky") == "submitted"

    t = flow.task("flaky")
    assert t.attempts == 2 and t.backend_id != first
    ended = timezone.now()
    t = flow.finish("flaky", JobState.FAILED, exit_code=2)
    assert "retrying in 2s" in t.reason  # the backoff doubles
    assert t.not_before >= ended + timedelta(seconds=2)
    assert flow.retry_now("flaky") == "submitted"

    t = flow.finish("flaky", JobState.SUCCEEDED, exit_code=0)
    assert (t.state, t.attempts, t.exit_code) == ("succeeded", 3, 0)
    assert len(flow.jobs("flaky")) == 3  # a new backend job per attempt
    assert flow.refreshed().state == "succeeded"
    detail = api.get(f"/api/v1/tasks/{t.pk}/").json()
    attempts = [(a["number"], a["state"], a["exit_code"]) for a in detail["attempt_list"]]
    assert attempts == [(1, "failed", 1), (2, "failed", 2), (3, "succeeded", 0)]
    listed = api.get(f"/api/v1/workflows/{flow.workflow.pk}/").json()["tasks"]
    assert [(x["name"], x["attempts"]) for x in listed] == [("flaky", 3)]


def test_with_retry_count_1_two_failures_end_failed(flow):
    flow.submit(task("flaky", retry_count=1), task("after", "flaky"))
    flow.finish("flaky", JobState.FAILED, exit_code=1)
    flow.retry_now("flaky")
    t = flow.finish("flaky", JobState.FAILED, exit_code=1)
    assert (t.state, t.attempts) == ("failed", 2)
    assert flow.state("after") == "cancelled"
    assert flow.refreshed().state == "failed"


def test_a_cancelled_job_is_not_retried(flow):
    flow.submit(task("t", retry_count=2))
    t = flow.finish("t", JobState.CANCELLED)
    assert (t.state, t.attempts) == ("cancelled", 1)
    assert len(flow.jobs("t")) == 1


def test_a_task_cancelled_by_its_user_is_not_retried(flow, api):
    flow.submit(task("t", retry_count=2))
    flow.finish("t", JobState.RUNNING)
    t = flow.task("t")
    with flow.run():
        # 202: a worker cancels the job (here, at the end of the block).
        assert api.post(f"/api/v1/tasks/{t.pk}/cancel/").status_code == 202
    assert FakeBackend.jobs_for("fake")[t.backend_id].state is JobState.CANCELLED
    with flow.run():
        engine.backend_poll("fake")  # the backend now reports the job cancelled
    t.refresh_from_db()
    assert (t.state, t.attempts) == ("cancelled", 1)
    assert engine.task_dispatch(t.pk) == "not-claimed"


# --- wait timeout -----------------------------------------------------------------------------


def test_a_task_whose_dependency_never_finishes_is_cancelled_at_its_wait_timeout(flow, api):
    flow.submit(task("a"), task("b", "a", wait_timeout="1h"), task("c", "b"))
    now = timezone.now()
    assert settle.expire_waiting(now=now + timedelta(minutes=59)) == 0
    with flow.run():
        assert settle.expire_waiting(now=now + timedelta(hours=1, minutes=1)) == 1
    b = flow.task("b")
    assert b.state == "cancelled"
    assert b.reason == "waited longer than its wait_timeout (1h); waiting for a"
    assert api.get(f"/api/v1/tasks/{b.pk}/").json()["reason"] == b.reason
    # fail_action abort (the default) applies: its dependants never run, the workflow fails.
    assert flow.state("c") == "cancelled"
    wf = flow.refreshed()
    assert wf.state == "failed" and "task b ended cancelled: waited longer" in wf.reason
    assert flow.state("a") == "queued"  # the slow one itself is left alone


def test_a_wait_timeout_with_skip_lets_the_dependants_run(flow):
    flow.submit(task("a"), task("b", "a", wait_timeout="30m", fail_action="skip"), task("c", "b"))
    with flow.run():
        settle.expire_waiting(now=timezone.now() + timedelta(hours=1))
    assert flow.state("b") == "skipped" and "wait_timeout (30min)" in flow.task("b").reason
    assert flow.state("c") == "queued"
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    flow.finish("c", JobState.SUCCEEDED, exit_code=0)
    assert flow.refreshed().state == "succeeded"
