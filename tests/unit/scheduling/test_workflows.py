"""Workflows on the in-memory fake backend: release, retries, fail actions, wait timeouts,
triggers, cancel, refused DAGs, and the release race on PostgreSQL.

Celery runs eagerly here and what a transaction schedules on commit (settling dependants,
dispatching a released task) is run at once inside `flow.run()`, so a test reads as the
worker would act: submit, the backend reports a job's end, the engine polls.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from scheduling import engine, services
from scheduling.backends import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import get_backend, settle
from scheduling.models import Task, TaskEvent, Workflow
from tests.conftest import descriptor

pytestmark = pytest.mark.django_db


def task(name: str, *deps: str | int, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "resources": {"cpus": 1, "memory": "1Gi"},
        "walltime": "10m",
        "command": ["true"],
        **fields,
    }
    if deps:
        body["depends_on"] = list(deps)
    return body


def workflow(*tasks: dict[str, Any], name: str = "wf", project: str = "materials") -> dict:
    return {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": name,
        "project": project,
        "tasks": list(tasks),
    }


DIAMOND = (task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c"))


@pytest.fixture(autouse=True)
def _eager_celery():
    """A dispatch enqueued on commit runs at once, in this process, not through a broker."""
    from config.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


class Flow:
    """Drives a workflow through the engine the way the worker would."""

    def __init__(self, api, capture) -> None:
        self.api = api
        self.capture = capture
        self.backend = get_backend("fake")
        self.workflow: Workflow | None = None

    @contextlib.contextmanager
    def run(self):
        """Run what the block schedules on commit (settling, dispatch) at its end."""
        with self.capture(execute=True):
            yield

    def submit(self, *tasks: dict[str, Any], **fields: Any) -> Workflow:
        with self.run():
            response = self.api.post(
                "/api/v1/workflows/",
                data=json.dumps(workflow(*tasks, **fields)),
                content_type="application/json",
            )
        assert response.status_code == 201, response.json()
        self.workflow = Workflow.objects.get(pk=response.json()["id"])
        return self.workflow

    def task(self, name: str) -> Task:
        return self.workflow.tasks.get(name=name)

    def state(self, name: str) -> str:
        return self.task(name).state

    def states(self) -> dict[str, str]:
        return dict(self.workflow.tasks.values_list("name", "state"))

    def jobs(self, name: str) -> list[str]:
        prefix = f"sy-{self.task(name).pk}-"
        return sorted(key for key in FakeBackend.jobs_for("fake") if key.startswith(prefix))

    def finish(self, name: str, state: JobState, exit_code: int | None = None) -> Task:
        """The backend reports the task's current job in `state`; the engine polls."""
        current = self.task(name)
        assert current.backend_id, f"{name} has no job ({current.state}: {current.reason})"
        self.backend.finish(current.backend_id, state, exit_code=exit_code)
        with self.run():
            engine.backend_poll("fake")
        return self.task(name)

    def retry_now(self, name: str) -> str:
        """Let the backoff pass (rather than sleep through it) and dispatch the next attempt."""
        current = self.task(name)
        assert current.state == "pending" and current.not_before > timezone.now()
        assert engine.task_dispatch(current.pk) == "not-claimed", "the backoff was not respected"
        Task.objects.filter(pk=current.pk).update(not_before=timezone.now())
        with self.run():
            return engine.task_dispatch(current.pk)

    def refreshed(self) -> Workflow:
        self.workflow.refresh_from_db()
        return self.workflow


@pytest.fixture
def flow(api, django_capture_on_commit_callbacks) -> Flow:
    return Flow(api, django_capture_on_commit_callbacks)


def _events(task: Task) -> list[tuple[str, str]]:
    return [(e.from_state, e.to_state) for e in task.events.order_by("at", "id")]


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


# --- triggers ---------------------------------------------------------------------------------


@pytest.fixture
def trigger_root(settings, tmp_path):
    root = tmp_path / "triggers"
    root.mkdir()
    settings.SWITCHYARD_TRIGGER_ROOTS = [str(root)]
    return root


def test_a_trigger_file_releases_the_waiting_task_once_it_exists(flow, trigger_root):
    ready = trigger_root / "READY"
    flow.submit(task("agent", trigger={"file": str(ready)}))
    with flow.run():
        assert settle.check_triggers() == 1
    t = flow.task("agent")
    assert t.state == "waiting" and t.reason == f"waiting for the trigger file {ready}"
    assert flow.jobs("agent") == []

    ready.touch()
    with flow.run():
        settle.check_triggers()
    t = flow.task("agent")
    assert t.state == "queued" and len(flow.jobs("agent")) == 1
    assert "trigger file" in t.events.get(to_state="pending").message


def test_a_trigger_waits_for_the_dependencies_too(flow, trigger_root):
    ready = trigger_root / "READY"
    ready.touch()
    flow.submit(task("a"), task("b", "a", trigger={"file": str(ready)}))
    with flow.run():
        settle.check_triggers()
    assert flow.task("b").reason == "waiting for a"
    flow.finish("a", JobState.SUCCEEDED, exit_code=0)
    assert flow.state("b") == "queued"


class StatCount:
    """Counts the file system look-ups (stat and lstat) made while it is on."""

    def __init__(self, monkeypatch) -> None:
        self.calls = 0
        for name in ("stat", "lstat"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._counting(real))

    def _counting(self, real):
        def call(*args, **kwargs):
            self.calls += 1
            return real(*args, **kwargs)

        return call


def test_a_trigger_pass_over_thousands_of_unchanged_triggers_costs_a_query_and_a_stat_per_folder(
    flow, trigger_root, monkeypatch
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    folders = [trigger_root / f"run-{n}" for n in range(3)]
    for folder in folders:
        folder.mkdir()
    flow.submit(task("first", trigger={"file": str(folders[0] / "READY-0")}))
    first = flow.task("first")
    copies = []
    for i in range(1, 3000):  # 3,000 waiting tasks, a thousand a folder, each its own file
        copy = Task(**{f.attname: getattr(first, f.attname) for f in Task._meta.concrete_fields})
        copy.pk, copy.name = None, f"t{i}"
        copy.trigger_file = str(folders[i % 3] / f"READY-{i}")
        copies.append(copy)
    Task.objects.bulk_create(copies)
    for folder in folders:  # written a while ago
        os.utime(folder, ns=(time.time_ns() - 10**10,) * 2)
    assert settle.check_triggers() == 3000  # the first look at each folder reads its files

    stats = StatCount(monkeypatch)
    with CaptureQueriesContext(connection) as queries:
        assert settle.check_triggers() == 0
    assert len(queries) == 1, [q["sql"][:120] for q in queries]
    assert stats.calls == 3  # one per folder, none per task

    (folders[1] / "READY-4").touch()  # one file appears: its folder changes
    with flow.run():
        assert settle.check_triggers() == 1000  # that folder's tasks, not the others
    released = Task.objects.exclude(state="waiting").values_list("name", flat=True)
    assert list(released) == ["t4"]


def test_a_trigger_outside_the_roots_is_a_400_naming_the_field(api, trigger_root, tmp_path):
    doc = workflow(task("a"), task("b", "a", trigger={"file": str(tmp_path / "elsewhere")}))
    response = api.post("/api/v1/workflows/", data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error["field"] == "tasks[1].trigger.file" and str(trigger_root) in error["message"]
    assert Task.objects.count() == Workflow.objects.count() == 0


def test_a_symlink_in_the_root_that_leads_outside_is_not_honoured(
    flow, api, trigger_root, tmp_path_factory
):
    outside = tmp_path_factory.mktemp("outside")
    (outside / "READY").touch()
    flow.submit(task("agent", trigger={"file": str(trigger_root / "READY")}))
    os.symlink(outside / "READY", trigger_root / "READY")  # planted after the submit
    with flow.run():
        settle.check_triggers()
    assert flow.state("agent") == "waiting" and flow.jobs("agent") == []

    # A folder in the root that links outside is refused when the descriptor is checked.
    os.symlink(outside, trigger_root / "out")
    doc = workflow(task("x", trigger={"file": str(trigger_root / "out" / "READY")}), name="wf2")
    response = api.post("/api/v1/workflows/", data=json.dumps(doc), content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "tasks[0].trigger.file"


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


# --- refused workflows ------------------------------------------------------------------------


def _post(api, doc) -> Any:
    body = doc if isinstance(doc, str) else json.dumps(doc)
    return api.post("/api/v1/workflows/", data=body, content_type="application/json")


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


# --- the release race -------------------------------------------------------------------------


# Two connections really race only on PostgreSQL: SQLite runs one writer at a time
# (the `postgres_only` fixture, tests/conftest.py).


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("entry", ["settle_waiting", "after_ends"])
def test_two_workers_releasing_the_same_dependant_dispatch_it_once(
    postgres_only, api, monkeypatch, entry
):
    response = _post(api, workflow(task("a"), task("b", "a")))
    assert response.status_code == 201, response.json()
    wf = Workflow.objects.get(pk=response.json()["id"])
    a, b = wf.tasks.get(name="a"), wf.tasks.get(name="b")
    assert b.state == "waiting"
    # a has succeeded; both workers see it and settle its dependant at the same moment.
    Task.objects.filter(pk=a.pk).update(state="succeeded")
    a.refresh_from_db()

    # Hold each worker at its write until both have read b as waiting: the worst interleaving.
    real_set_state = settle.task_set_state
    at_write = threading.Barrier(2, timeout=10)

    def set_state_after_both_read(**kwargs):
        if kwargs["task"].pk == b.pk and kwargs["to"] == "pending":
            at_write.wait()
        return real_set_state(**kwargs)

    monkeypatch.setattr(settle, "task_set_state", set_state_after_both_read)
    start = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            start.wait()
            if entry == "settle_waiting":
                settle.settle_waiting([b.pk])
            else:
                settle.after_ends([Task.objects.get(pk=a.pk)])
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors

    b.refresh_from_db()
    assert b.state == "queued" and b.attempts == 1
    jobs = [k for k in FakeBackend.jobs_for("fake") if k.startswith(f"sy-{b.pk}-")]
    assert len(jobs) == 1
    assert TaskEvent.objects.filter(task=b, from_state="waiting", to_state="pending").count() == 1
    submits = [c for c in get_backend("fake").calls if c[0] == "submit" and c[1][0].key in jobs]
    assert len(submits) == 1
