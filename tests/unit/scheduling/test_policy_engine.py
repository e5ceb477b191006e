"""Quotas, levels and priority requests through the engine and the API (fake backend).

The clock is passed to the policy pass (`now=`) instead of slept through.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.engine.levels import policy_pass, relevel
from scheduling.models import ClassifierSettings, PriorityRequest, Quota, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.quotas import quota_set
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

TRAINING = {
    "type": "ai-training",
    "estimate": "1h",
    "walltime": "2h",
    "resources": {"nodes": 2, "gpus": 16, "cpus": 16, "memory": "8Gi"},
}


def _submit(api, **fields) -> Task:
    response = submit(api, descriptor(**fields))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


def _dispatch(task: Task) -> Task:
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    return task


@pytest.fixture
def quinn(site) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="quinn"))
    return client


# -- quotas -------------------------------------------------------------------------------


@pytest.fixture
def plain_quota(site):
    """materials' training quota without borrowing: over its 32 GPUs, training waits (the
    default site's lends: tests/unit/scheduling/test_quota_lending_engine.py)."""
    quota_set(project="materials", queue="training", resource="gpus", limit=32, borrowing_limit=0)
    site_view_invalidate()


def test_a_task_over_its_projects_gpu_quota_waits_naming_the_quota(api, plain_quota):
    first, second, third = (_submit(api, name=f"t{i}", **TRAINING) for i in range(3))
    assert _dispatch(first).state == "queued" and first.admitted
    assert _dispatch(second).state == "queued"
    assert engine.task_dispatch(third.pk) == "held"
    third.refresh_from_db()
    assert (third.state, third.hold) == ("waiting", "quota")
    assert third.reason == "project materials uses 32/32 GPUs in queue training; it waits for room"
    assert len(get_backend("fake").requests_for("fake")) == 2  # nothing reached the backend


def test_a_quota_held_task_is_released_when_an_admitted_one_ends(api, plain_quota):
    first, second, third = (_submit(api, name=f"t{i}", **TRAINING) for i in range(3))
    for task in (first, second, third):
        engine.task_dispatch(task.pk)
    first.refresh_from_db()
    get_backend("fake").finish(first.backend_id, JobState.SUCCEEDED, exit_code=0)
    engine.backend_poll("fake")
    third.refresh_from_db()
    assert third.state == "pending" and third.hold == ""
    assert _dispatch(third).state == "queued"
    assert third.events.filter(message="released: its quota has room").exists()


def test_a_raised_quota_releases_waiting_tasks_without_resubmission(api, plain_quota):
    tasks = [_submit(api, name=f"t{i}", **TRAINING) for i in range(3)]
    for task in tasks:
        engine.task_dispatch(task.pk)
    held = Task.objects.get(pk=tasks[2].pk)
    assert held.state == "waiting"
    quota_set(project="materials", queue="training", resource="gpus", limit=48)
    site_view_invalidate()
    assert policy_pass().released == 1
    held.refresh_from_db()
    assert held.state == "pending"


def test_a_lowered_quota_updates_the_numbers_in_the_reason(api, plain_quota):
    tasks = [_submit(api, name=f"t{i}", **TRAINING) for i in range(3)]
    for task in tasks:
        engine.task_dispatch(task.pk)
    quota_set(project="materials", queue="training", resource="gpus", limit=24)
    site_view_invalidate()
    policy_pass()
    held = Task.objects.get(pk=tasks[2].pk)
    assert held.reason.startswith("project materials uses 32/24 GPUs")


def test_a_reject_quota_refuses_at_submit_naming_it(api, plain_quota):
    quota_set(project="materials", queue="training", resource="gpus", limit=16, over_quota="reject")
    site_view_invalidate()
    _dispatch(_submit(api, name="fits", **TRAINING))
    response = submit(api, descriptor(name="over", **TRAINING))
    assert response.status_code == 409
    [error] = response.json()["errors"]
    assert error["field"] == "resources.gpus" and error["got"] == 16
    assert error["message"].startswith("project materials uses 16/16 GPUs in queue training")


def test_asking_more_than_the_quota_at_all_is_a_400(api, plain_quota):
    big = {**TRAINING, "resources": {"nodes": 5, "gpus": 40, "cpus": 40}}
    response = submit(api, descriptor(name="huge", **big))
    assert response.status_code == 400
    assert "may hold at most 32 GPUs in queue training" in response.json()["errors"][0]["message"]


def test_a_users_own_quota_holds_only_their_tasks(api, outsider_api):
    quota_set(project="materials", queue="hpc", resource="tasks", limit=1, user="alice")
    site_view_invalidate()
    first = _submit(api, name="a1", type="hpc-simulation")
    second = _submit(api, name="a2", type="hpc-simulation")
    assert _dispatch(first).state == "queued"
    assert engine.task_dispatch(second.pk) == "held"
    second.refresh_from_db()
    assert second.reason.startswith("alice in project materials uses 1/1 running tasks")


def test_the_quota_api_shows_limit_and_use_and_hides_other_projects(api, outsider_api):
    _dispatch(_submit(api, name="t0", **TRAINING))
    [row] = api.get("/api/v1/projects/materials/quotas/").json()
    assert row == {
        "queue": "training",
        "user": None,
        "resource": "gpus",
        "limit": 32,
        "used": 16,
        "over_quota": "queue",
        "period": None,
        "borrowing_limit": 96,
        "lending_limit": None,
        "borrowed": 0,
        "on_borrowed_room": {"running": 0, "waiting": 0},
        "text": "project materials uses 16/32 GPUs in queue training; may borrow up to 96 "
        "GPUs over its quota; lends all of what it does not use",
    }
    assert outsider_api.get("/api/v1/projects/materials/quotas/").status_code == 404


def test_manage_quota_sets_and_lists(site, capsys):
    call_command("quota", "set", "genomics", "hpc", "cpus", "128", "--over-quota", "reject")
    call_command("quota", "list", "--project", "genomics")
    out = capsys.readouterr().out
    assert "project genomics uses 0/128 CPUs in queue hpc (over it: refused)" in out
    assert Quota.objects.get(project__slug="genomics", queue__name="hpc").limit == 128


# -- levels ---------------------------------------------------------------------------------


def test_an_agent_task_drops_to_medium_after_30s_and_the_backend_hears_of_it(api):
    task = _dispatch(_submit(api, name="agent", type="agent"))
    assert task.level == 2 and task.level_reason == "agent tasks enter high"
    backend = get_backend("fake")
    assert backend.requests_for("fake")[task.backend_id].priority == task.priority_value
    before = task.priority_value
    assert relevel(now=task.ready_at + timedelta(seconds=31)) == 1
    task.refresh_from_db()
    assert task.level == 1 and task.priority_value < before
    assert backend.priority_of(task.backend_id) == task.priority_value
    event = task.events.get(message__startswith="level high → medium")
    assert "dropped to medium after 30s waiting" in event.message


def test_training_rises_to_high_after_ten_minutes_waiting(api):
    task = _submit(api, name="trains", **TRAINING)
    assert task.level == 1
    relevel(now=task.ready_at + timedelta(minutes=10, seconds=1))
    task.refresh_from_db()
    assert task.level == 2


def test_hpc_enters_low_and_a_descriptor_asking_high_makes_a_request_not_a_raise(api):
    task = _submit(api, name="urgent", type="hpc-simulation", priority="high")
    assert task.level == 0
    request = PriorityRequest.objects.get(task=task)
    assert (request.state, request.level) == ("pending", 2)
    assert task.events.filter(message__contains=f"request #{request.pk}").exists()
    detail = api.get(f"/api/v1/tasks/{task.pk}/").json()
    assert detail["level"] == "low" and detail["wait"]["pending_request"] == request.pk


# -- priority requests ----------------------------------------------------------------------


def _ask(client, task, **fields):
    body = {"task": task.pk, "level": "high", "reason": "paper deadline", "until": "2h", **fields}
    return client.post("/api/v1/priority-requests/", body, format="json")


def test_a_request_is_approved_by_a_queue_admin_applies_and_reverts_at_expiry(api, quinn, worker):
    task = _dispatch(_submit(api, name="sim", type="hpc-simulation"))
    response = _ask(api, task)
    assert response.status_code == 201, response.json()
    request_id = response.json()["id"]
    assert [r["id"] for r in quinn.get("/api/v1/priority-requests/?inbox=1").json()["results"]] == [
        request_id
    ]
    # The researcher may not decide their own request.
    assert api.post(f"/api/v1/priority-requests/{request_id}/approve/").status_code == 403
    mail.outbox.clear()
    with worker():  # the approval asks a worker to apply the level
        approved = quinn.post(
            f"/api/v1/priority-requests/{request_id}/approve/", {"comment": "ok"}, format="json"
        )
    assert approved.status_code == 200 and approved.json()["state"] == "approved"
    task.refresh_from_db()
    assert task.level == 2 and "approved by quinn" in task.level_reason
    assert get_backend("fake").priority_of(task.backend_id) == task.priority_value
    assert mail.outbox[0].to == ["alice@example.org"]
    assert "approved by quinn" in mail.outbox[0].body
    # At its end the raise goes away, and the requester is told.
    request = PriorityRequest.objects.get(pk=request_id)
    result = policy_pass(now=request.until + timedelta(seconds=1))
    assert result.expired == 1
    task.refresh_from_db()
    assert task.level == 0
    assert PriorityRequest.objects.get(pk=request_id).state == "expired"
    assert "expired" in mail.outbox[-1].subject
    assert task.events.filter(message__startswith="level high → low").exists()


def test_a_rejected_request_changes_nothing(api, quinn):
    task = _submit(api, name="sim", type="hpc-simulation")
    request_id = _ask(api, task).json()["id"]
    rejected = quinn.post(f"/api/v1/priority-requests/{request_id}/reject/", {"comment": "no"})
    assert rejected.status_code == 200 and rejected.json()["state"] == "rejected"
    assert quinn.post(f"/api/v1/priority-requests/{request_id}/approve/").status_code == 409
    relevel()
    task.refresh_from_db()
    assert task.level == 0


def test_a_project_request_raises_every_task_of_the_project_in_the_queue(api, quinn, worker):
    tasks = [_submit(api, name=f"s{i}", type="hpc-simulation") for i in range(2)]
    made = api.post(
        "/api/v1/priority-requests/",
        {"project": "materials", "queue": "hpc", "level": "medium", "reason": "x", "until": "1h"},
        format="json",
    )
    assert made.status_code == 201, made.json()
    with worker():
        quinn.post(f"/api/v1/priority-requests/{made.json()['id']}/approve/")
    assert {t.level for t in Task.objects.filter(pk__in=[t.pk for t in tasks])} == {1}


def test_requests_are_checked_and_hidden_from_other_projects(api, outsider_api):
    task = _submit(api, name="sim", type="hpc-simulation")
    assert _ask(api, task, until="2999-01-01T00:00Z").json()["errors"][0]["field"] == "until"
    assert _ask(api, task, level="low").json()["errors"][0]["field"] == "level"
    assert _ask(api, task, reason="").json()["errors"][0]["field"] == "reason"
    made = _ask(api, task).json()["id"]
    assert _ask(api, task).status_code == 409  # one pending at a time
    assert _ask(outsider_api, task).status_code == 404
    assert outsider_api.get("/api/v1/priority-requests/").json()["results"] == []
    assert outsider_api.post(f"/api/v1/priority-requests/{made}/approve/").status_code == 404


def test_the_inbox_page_lets_a_queue_admin_decide(site, api, client, worker):
    task = _submit(api, name="sim", type="hpc-simulation")
    request_id = _ask(api, task).json()["id"]
    running = _submit(api, name="already-running", type="hpc-simulation")
    late_id = _ask(api, running).json()["id"]  # asked while it waited; it started since
    Task.objects.filter(pk=running.pk).update(state="running", started_at=timezone.now())
    client.force_login(User.objects.get(username="quinn"))
    page = client.get("/priority-requests/").content.decode()
    assert f'id="request-{request_id}"' in page and "paper deadline" in page
    # Where each task stands now: the waiting one's place, the running one seen as running.
    row = page[page.index(f'id="request-{request_id}"') :]
    row = row[: row.index("</tr>")]
    state = Task.objects.get(pk=task.pk).state
    assert f'state-{state}">{state}</span>' in row and "waiting" in row
    assert "1 of 1 waiting in hpc" in row
    late = page[page.index(f'id="request-{late_id}"') :]
    late = late[: late.index("</tr>")]
    assert 'state-running">running</span>' in late and "for " in late and "waiting in" not in late
    # A level no longer applies to it: the request is closed, not approved.
    assert f'id="approve-{late_id}"' not in late and "Close it" in late
    with worker():
        response = client.post(
            f"/priority-requests/{request_id}/approve/", {"comment": "go"}, follow=True
        )
    assert f"Request #{request_id} approved." in response.content.decode()
    assert Task.objects.get(pk=task.pk).level == 2


# -- why waiting, classification, queues page ---------------------------------------------


def test_why_waiting_names_the_quota_the_position_and_an_estimate(api, browser, plain_quota):
    tasks = [_submit(api, name=f"t{i}", **TRAINING) for i in range(3)]
    for task in tasks:
        engine.task_dispatch(task.pk)
    get_backend("fake").finish(Task.objects.get(pk=tasks[0].pk).backend_id, JobState.RUNNING)
    engine.backend_poll("fake")
    wait = api.get(f"/api/v1/tasks/{tasks[2].pk}/").json()["wait"]
    assert wait["kind"] == "quota"
    assert wait["message"].startswith("project materials uses 32/32 GPUs")
    assert (wait["position"], wait["waiting_in_queue"]) == (2, 2)
    assert wait["level"] == "medium"
    # The running one frees its 16 GPUs at its walltime (2h), before the admitted one that
    # has not started yet; the pool has room then, so that is the estimate.
    first = Task.objects.get(pk=tasks[0].pk)
    frees = first.started_at + timedelta(hours=2)
    estimated = datetime.fromisoformat(wait["estimated_start"])
    assert abs(estimated - frees) < timedelta(seconds=1)
    assert wait["waits_for"].startswith(f"held by quota until task #{first.pk} (walltime ends ")
    assert wait["waits_for"].endswith(f"{frees:%H:%M} UTC) ends")
    page = browser.get(f"/tasks/{tasks[2].pk}/").content.decode()
    assert f'<span id="task-waits-for">held by quota until task #{first.pk}' in page


def test_a_reserved_task_is_estimated_to_start_at_its_reservation(api):
    task = _dispatch(_submit(api, name="big", **TRAINING))
    assert task.state == "queued"
    reason = "reserved from 2026-01-05 14:20 UTC on gpu007-gpu010 (4 nodes free by then)"
    Task.objects.filter(pk=task.pk).update(reason=reason)
    wait = api.get(f"/api/v1/tasks/{task.pk}/").json()["wait"]
    assert (wait["kind"], wait["message"]) == ("backend", reason)
    assert wait["estimated_start"] == "2026-01-05T14:20:00+00:00"
    # A reason in other words is not read: the pool replay answers (the pool is free: now).
    Task.objects.filter(pk=task.pk).update(reason="reserved from whenever")
    wait = api.get(f"/api/v1/tasks/{task.pk}/").json()["wait"]
    estimated = datetime.fromisoformat(wait["estimated_start"])
    assert abs(estimated - timezone.now()) < timedelta(minutes=1)


def test_the_classifier_thresholds_are_data(api):
    from scheduling.services import task_decide
    from scheduling.spec import Resources, TaskSpec

    spec = TaskSpec("x", "materials", Resources(gpus=2), estimate_s=3 * 3600, walltime_s=4 * 3600)
    assert task_decide(spec).type == "ai-training"  # more than one GPU, over 2 h
    ClassifierSettings.objects.create(many_gpus=8)
    site_view_invalidate()
    decided = task_decide(dataclasses.replace(spec, walltime_s=3600, estimate_s=None))
    assert decided.type == "ai-inference"
    assert "fewer than the 8 of a training job" in decided.classify_reason


def test_the_queues_page_shows_rules_weights_and_quotas(browser):
    page = browser.get("/queues/").content.decode()
    assert "agent tasks enter high and drop to medium after 30s unstarted" in page
    assert "08:00–20:00: agent × 2, sandbox × 2" in page
    assert "project materials uses 0/32 GPUs in queue training" in page


def test_a_weight_schedule_is_validated_in_the_admin_form(site):
    from django.core.exceptions import ValidationError

    from scheduling.models import Queue

    queue = Queue.objects.get(name="hpc")
    queue.weight_schedule = [{"from": "25:00", "to": "08:00", "weights": {"agent": 2}}]
    with pytest.raises(ValidationError, match="weight_schedule"):
        queue.full_clean()


def test_the_task_page_offers_a_raise_and_shows_the_level(browser, researcher, api):
    task = _submit(api, name="sim", type="hpc-simulation")
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="task-level-name">low<' in page and 'id="ask-priority"' in page
    response = browser.post(
        f"/tasks/{task.pk}/priority/",
        {"level": "high", "reason": "deadline", "until": "3h"},
        follow=True,
    )
    assert "a queue admin of hpc decides" in response.content.decode()
    request = PriorityRequest.objects.get(task=task)
    assert request.until > timezone.now() + timedelta(hours=2, minutes=59)
