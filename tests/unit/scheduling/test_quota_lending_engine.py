"""Quotas that lend in the live engine: admission borrows the cohort's unused quota and says
so on the task page, the Queues page and the API; a held borrower starts when a lender's
own work ends; the limits are set, validated and versioned with the quota.

The default site's training quota: 32 GPUs per project, borrowing up to 96 more, lending
all it does not use; the demo has three projects (materials, climate, genomics), so
materials may borrow 2 × 32 = 64 while the others are idle.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.utils import timezone

from portal.errors import ApplicationError
from portal.models import ConfigVersion
from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.engine.capacity import capacity_pass
from scheduling.models import Node, Quota, Task
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


def _submit(api, project="materials", **fields) -> Task:
    response = submit(api, descriptor(project=project, **TRAINING, **fields))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


def _dispatched(api, n: int, project="materials") -> list[Task]:
    tasks = [_submit(api, project, name=f"{project}-{i}") for i in range(n)]
    for task in tasks:
        engine.task_dispatch(task.pk)
        task.refresh_from_db()
    return tasks


def _lends(project: str, lending_limit: int | None) -> None:
    quota_set(
        project=project, queue="training", resource="gpus", limit=32, lending_limit=lending_limit
    )
    site_view_invalidate()


def test_over_its_quota_a_training_borrows_and_every_page_says_so(api, browser):
    first, second, third = _dispatched(api, 3)
    assert (first.borrowed, second.borrowed) == ("", "")
    assert (third.state, third.borrowed) == ("queued", "16 GPUs")
    page = browser.get(f"/tasks/{third.pk}/").content.decode()
    assert "Waits to start on borrowed room: 16 GPUs of other projects' unused quota" in page
    assert "never preempted for it: lenders get their room back" in page
    queues = browser.get("/queues/").content.decode()
    assert "project materials uses 48/32 GPUs in queue training; 16 of it borrowed" in queues
    assert "on borrowed room: 0 running, 1 waiting to start" in queues

    get_backend("fake").finish(third.backend_id, JobState.RUNNING)
    engine.backend_poll("fake")
    page = browser.get(f"/tasks/{third.pk}/").content.decode()
    assert "Runs on borrowed room: 16 GPUs" in page
    assert api.get(f"/api/v1/tasks/{third.pk}/").json()["borrowed"] == "16 GPUs"
    [row] = api.get("/api/v1/projects/materials/quotas/").json()
    assert (row["used"], row["borrowed"]) == (48, 16)
    assert row["on_borrowed_room"] == {"running": 1, "waiting": 0}


def test_work_on_borrowed_room_starts_after_a_lenders_work_on_its_own_quota(api):
    *_, borrower = _dispatched(api, 3)  # materials' third borrows 16 GPUs
    [lender] = _dispatched(api, 1, project="climate")  # climate within its own 32, later
    assert (borrower.borrowed, lender.borrowed) == ("16 GPUs", "")
    assert borrower.level == lender.level
    # The backend starts higher numbers first: the lender's job, though it came later.
    requests = get_backend("fake").requests_for("fake")
    assert requests[lender.backend_id].priority == lender.priority_value
    assert requests[borrower.backend_id].priority == borrower.priority_value
    assert lender.priority_value > borrower.priority_value


def test_past_what_the_cohort_lends_it_waits_naming_what_is_left(api):
    _lends("climate", 8)
    _lends("genomics", 0)
    *_, held = _dispatched(api, 3)
    assert (held.state, held.hold) == ("waiting", "quota")
    assert held.reason == (
        "project materials uses 32/32 GPUs in queue training; the cohort has 8 GPUs to lend, "
        "it asks 16; it waits for room"
    )


def test_a_held_borrower_starts_when_a_lenders_own_work_ends(api):
    _lends("climate", None)
    _lends("genomics", 0)
    first, _ = _dispatched(api, 2, project="climate")  # climate uses all 32: lends nothing
    *_, held = _dispatched(api, 3)
    assert held.state == "waiting"
    get_backend("fake").finish(first.backend_id, JobState.SUCCEEDED, exit_code=0)
    engine.backend_poll("fake")
    held.refresh_from_db()
    assert held.state == "pending"
    assert held.events.filter(message="released: the cohort lends it 16 GPUs of unused quota")
    engine.task_dispatch(held.pk)
    held.refresh_from_db()
    assert (held.state, held.borrowed) == ("queued", "16 GPUs")


def test_asking_more_than_its_quota_and_all_it_may_borrow_is_a_400(api):
    big = {**TRAINING, "resources": {"nodes": 13, "gpus": 104, "cpus": 104}}
    response = submit(api, descriptor(name="huge", **big))
    assert response.status_code == 400
    assert response.json()["errors"][0]["message"] == (
        "asks 104 GPUs, but project materials may hold at most 96 GPUs in queue training with "
        "what it may borrow"
    )


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"borrowing_limit": -1}, "borrowing_limit", "must be a whole number, 0 or more"),
        ({"lending_limit": "all"}, "lending_limit", "must be a whole number, 0 or more, or"),
        ({"user": "alice", "borrowing_limit": 8}, "borrowing_limit", "only a whole project's"),
        ({"resource": "gpu_hours", "lending_limit": 8}, "lending_limit", "only a quota of gpus"),
    ],
)
def test_lending_limits_are_checked_naming_the_field_and_what_came(site, fields, field, message):
    values = {"project": "materials", "queue": "training", "resource": "gpus", "limit": 8}
    with pytest.raises(ApplicationError) as raised:
        quota_set(**{**values, **fields})
    error = raised.value.errors[0]
    assert error.field == field and str(raised.value).startswith(message)
    assert error.got == fields[field]


def test_the_admin_form_refuses_a_members_quota_that_borrows(site):
    quota = Quota.objects.get(project__slug="materials", queue__name="training", user=None)
    quota.user_id = quota.project.pi_id
    with pytest.raises(ValidationError) as raised:
        quota.full_clean()
    assert "borrowing_limit" in raised.value.message_dict


def test_manage_quota_sets_the_limits_keeps_them_and_versions_them(site, capsys):
    call_command(
        "quota", "set", "genomics", "training", "gpus", "32",
        "--borrowing-limit", "8", "--lending-limit", "8",
    )  # fmt: skip
    call_command("quota", "set", "genomics", "training", "gpus", "40")  # limits kept
    quota = Quota.objects.get(project__slug="genomics", queue__name="training")
    assert (quota.limit, quota.borrowing_limit, quota.lending_limit) == (40, 8, 8)
    versions = ConfigVersion.objects.filter(model="scheduling.quota", object_id=quota.pk)
    changes = [(v.before or {}, v.after or {}) for v in versions.order_by("id")][-2:]
    assert [(b["borrowing_limit"], a["borrowing_limit"]) for b, a in changes] == [(96, 8), (8, 8)]
    assert [(b["lending_limit"], a["lending_limit"]) for b, a in changes] == [(None, 8), (8, 8)]
    call_command("quota", "set", "genomics", "training", "gpus", "40", "--lending-limit", "all")
    assert Quota.objects.get(pk=quota.pk).lending_limit is None
    call_command("quota", "list", "--project", "genomics")
    assert "may borrow up to 8 GPUs over its quota; lends all of what it does not use" in (
        capsys.readouterr().out
    )


def test_a_lender_within_its_quota_takes_borrowed_room_back_where_the_queue_preempts(api, settings):
    # The inference pool shrunk to inf001 (4 GPUs); each project: 2 GPUs, may borrow 2.
    settings.SWITCHYARD_PREEMPT_AFTER_S = 0
    Node.objects.filter(pool__name="inference-agent").exclude(name="inf001").update(
        state=Node.State.DRAINED
    )
    for project in ("materials", "climate"):
        quota_set(
            project=project, queue="inference-agent", resource="gpus", limit=2, borrowing_limit=2
        )
    site_view_invalidate()
    inference = {"type": "ai-inference", "walltime": "10m", "resources": {"gpus": 1, "cpus": 1}}
    mine = []
    for i in range(4):  # the last two on climate's unused quota
        task = Task.objects.get(pk=submit(api, descriptor(name=f"m{i}", **inference)).json()["id"])
        engine.task_dispatch(task.pk)
        task.refresh_from_db()
        assert task.state == "queued", task.reason
        get_backend("fake").finish(
            Task.objects.get(pk=task.pk).backend_id, JobState.RUNNING, nodes=("inf001",)
        )
        engine.backend_poll("fake")
        mine.append(Task.objects.get(pk=task.pk))
    assert [t.borrowed for t in mine] == ["", "", "1 GPU", "1 GPU"]
    lender = Task.objects.get(
        pk=submit(api, descriptor(name="c0", project="climate", **inference)).json()["id"]
    )
    engine.task_dispatch(lender.pk)
    # Same level as all four: only its claim on its own quota lets it preempt, and only the
    # borrowed work.
    assert capacity_pass(timezone.now() + timedelta(seconds=1))["preempted"] == 1
    [victim] = Task.objects.filter(pk__in=[t.pk for t in mine], state="pending")
    assert victim.pk in (mine[2].pk, mine[3].pk)
    assert lender.events.filter(message__contains="on borrowed quota").exists()
