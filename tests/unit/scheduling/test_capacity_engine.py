"""Capacity through the engine on the fake backend: preemption, leases, health, start-up.

The fake backend runs a job where the test says (`finish(..., RUNNING, nodes=...)`); the
passes take the clock as `now=`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.utils import timezone
from rest_framework.test import APIClient

from scheduling import engine, services
from scheduling.backends import BackendError, JobState, NodeHealth
from scheduling.backends.fake import FakeBackend
from scheduling.decisions.levels import HIGH, LOW
from scheduling.engine import get_backend
from scheduling.engine.capacity import capacity_pass
from scheduling.engine.health import health_pass, nodes_apply
from scheduling.models import (
    Alert,
    Attempt,
    LeaseSchedule,
    Node,
    NodeLease,
    Pool,
    PoolBorrowing,
    Queue,
    Task,
)
from scheduling.selectors import site_view, site_view_invalidate
from scheduling.services.capacity import open_lease
from tests.unit.scheduling.capacity_helpers import (
    INFERENCE,
    TRAINING,
    later,
    lend,
    run_on,
    submit_queued,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(site) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.filter(is_superuser=True).first())
    return client


# -- preemption ---------------------------------------------------------------------------


def test_a_waiting_high_level_task_preempts_the_lowest_running_inference_task(
    api, one_inference_node
):
    low = [run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001") for i in range(4)]
    high = submit_queued(api, "urgent", HIGH, **INFERENCE)

    assert capacity_pass(later())["preempted"] == 1

    victims = Task.objects.filter(pk__in=[t.pk for t in low], state="pending")
    [victim] = victims
    assert (victim.preemptions, victim.attempts, victim.backend_id) == (1, 1, "")
    attempt = Attempt.objects.get(task=victim, number=1)
    assert attempt.state == "preempted"
    assert attempt.reason.startswith(f"preempted by task #{high.pk} (urgent, high-level")
    assert ("cancel", (attempt.backend_id,)) in get_backend("fake").calls
    assert get_backend("fake").jobs_for("fake")[attempt.backend_id].state is JobState.CANCELLED
    assert victim.events.filter(message__contains="not counted against its retries").exists()
    assert high.events.filter(message__contains=f"#{victim.pk}").exists()
    # The others run on; the victim runs again as a new attempt, its retries untouched.
    assert Task.objects.filter(pk__in=[t.pk for t in low], state="running").count() == 3
    engine.task_dispatch(victim.pk)
    victim.refresh_from_db()
    assert (victim.state, victim.attempts, victim.attempts - victim.preemptions) == ("queued", 2, 1)


def test_a_second_pass_does_not_preempt_again_for_the_same_task(api, one_inference_node):
    for i in range(4):
        run_on(submit_queued(api, f"low{i}", LOW, **INFERENCE), "inf001")
    submit_queued(api, "urgent", HIGH, **INFERENCE)
    assert capacity_pass(later())["preempted"] == 1
    # The freed GPU waits for the urgent task: nothing more is preempted for it.
    assert capacity_pass(later(2))["preempted"] == 0
    assert Task.objects.filter(state="running").count() == 3


def test_equal_levels_never_preempt_and_young_waits_are_left_to_the_backend(
    api, one_inference_node, settings
):
    for i in range(4):
        run_on(submit_queued(api, f"med{i}", HIGH, **INFERENCE), "inf001")
    submit_queued(api, "same", HIGH, **INFERENCE)
    assert capacity_pass(later())["preempted"] == 0
    settings.SWITCHYARD_PREEMPT_AFTER_S = 3600
    Task.objects.filter(state="running").update(level=LOW)
    assert capacity_pass(later())["preempted"] == 0  # it has not waited an hour


def test_training_is_never_preempted_even_in_a_preemptible_queue(api, site, settings):
    settings.SWITCHYARD_PREEMPT_AFTER_S = 0
    Queue.objects.filter(name="training").update(preemptible=True)
    site_view_invalidate()
    nodes = list(Node.objects.filter(pool__name="gpu-train").values_list("name", flat=True))
    Node.objects.filter(pool__name="gpu-train").exclude(name=nodes[0]).update(state="drained")
    site_view_invalidate()
    running = run_on(submit_queued(api, "long", LOW, **TRAINING), nodes[0])
    submit_queued(api, "urgent", HIGH, **TRAINING)
    assert capacity_pass(later())["preempted"] == 0
    running.refresh_from_db()
    assert (running.state, running.preemptions) == ("running", 0)


# -- leases -------------------------------------------------------------------------------


def test_a_lease_moves_idle_nodes_to_the_borrowing_pool_until_its_end(api, site):
    busy = run_on(submit_queued(api, "busy", **INFERENCE), "inf001")
    lease = lend(2)
    lent = sorted(n.name for n in lease.nodes.all())
    assert lent == ["inf002", "inf003"]  # GPU nodes first; busy ones are not lent
    site_view_invalidate()
    view = site_view()
    training = {n.name: n for n in view.pool_nodes["gpu-train"]}
    assert set(lent) <= set(training)
    assert training[lent[0]].available_until == lease.ends_at.timestamp()
    assert not set(lent) & {n.name for n in view.pool_nodes["inference-agent"]}
    assert capacity_pass(later())["leases_applied"] == 1
    assert any(c[0] == "apply_lease" for c in get_backend("fake").calls)
    busy.refresh_from_db()
    assert busy.state == "running"


def test_at_the_end_of_a_lease_work_left_there_is_requeued_and_the_nodes_return(api, site):
    lease = lend(1, hours=1)
    [lent] = [n.name for n in lease.nodes.all()]
    task = run_on(
        submit_queued(api, "borrower", **{**TRAINING, "walltime": "50m", "estimate": "40m"}), lent
    )

    result = capacity_pass(lease.ends_at + timedelta(seconds=1))

    assert result["leases_reclaimed"] == 1
    lease.refresh_from_db()
    assert (lease.state, lease.requeued) == ("ended", 1)
    assert lease.reclaimed_at is not None
    task.refresh_from_db()
    assert (task.state, task.preemptions) == ("pending", 1)
    assert task.reason.startswith(f"lease #{lease.pk} ended: its nodes were taken back")
    assert get_backend("fake").jobs_for("fake")[task.key].state is JobState.CANCELLED
    assert ("end_lease", (f"lease-{lease.pk}", (lent,))) in get_backend("fake").calls
    site_view_invalidate()
    assert lent in {n.name for n in site_view().pool_nodes["inference-agent"]}


def test_a_backend_that_keeps_the_nodes_a_while_ends_the_lease_a_pass_later(api, site, monkeypatch):
    lease = lend(1, hours=1)
    [lent] = [n.name for n in lease.nodes.all()]
    task = run_on(
        submit_queued(api, "borrower", **{**TRAINING, "walltime": "50m", "estimate": "40m"}), lent
    )
    refusals = []

    def end_lease(self, view):
        if not refusals:  # like Slurm with jobs still in the lease's partition
            refusals.append(view.name)
            raise BackendError("Partition is in use")
        self._record("end_lease", view.name, view.nodes)

    monkeypatch.setattr(FakeBackend, "end_lease", end_lease)
    after = lease.ends_at + timedelta(seconds=1)
    assert capacity_pass(after)["leases_reclaimed"] == 1  # asked again once the work left
    lease.refresh_from_db()
    assert (lease.state, lease.requeued) == ("ended", 1)
    task.refresh_from_db()
    assert task.state == "pending"


def test_work_found_on_a_node_that_went_back_to_its_pool_is_requeued(api, site):
    task = run_on(submit_queued(api, "stray", **TRAINING), "inf007")  # not lent to training
    own = run_on(submit_queued(api, "own", **INFERENCE), "inf008")
    assert capacity_pass(later())["strays"] == 1
    task.refresh_from_db()
    assert task.state == "pending"
    assert task.reason.startswith("inf007 went back to its pool")
    own.refresh_from_db()
    assert own.state == "running"


def test_cpu_work_on_the_idle_cores_of_a_pool_its_own_borrows_from_is_no_stray(api, site):
    hpc = {"type": "hpc-simulation", "walltime": "10m", "resources": {"cpus": 4}}
    borrowed = run_on(submit_queued(api, "borrowed", **hpc), "agt001")  # cpu-hpc may borrow there
    PoolBorrowing.objects.filter(lender__name="gpu-train").delete()
    stray = run_on(submit_queued(api, "stray", **hpc), "gpu001")  # no such pair any more
    assert capacity_pass(later())["strays"] == 1
    borrowed.refresh_from_db()
    stray.refresh_from_db()
    assert (borrowed.state, stray.state) == ("running", "pending")


def test_a_lease_needs_idle_nodes_another_pool_and_a_sane_length(site):
    pool = Pool.objects.get(name="inference-agent")
    with pytest.raises(ValueError, match="idle node"):
        lend(count=99)
    with pytest.raises(ValueError, match="another pool"):
        open_lease(
            pool=pool, queue=Queue.objects.get(name="inference-agent"), count=1, duration_s=60
        )
    with pytest.raises(ValueError, match="at most"):
        lend(1, hours=100)


def test_nodes_already_lent_are_not_lent_twice(site):
    first = {n.name for n in lend(3).nodes.all()}
    second = {n.name for n in lend(3).nodes.all()}
    assert not first & second


def test_a_lease_schedule_opens_one_lease_a_window_and_alerts_when_it_cannot(site, settings):
    settings.TIME_ZONE = "UTC"
    schedule = LeaseSchedule.objects.get()
    LeaseSchedule.objects.update(enabled=True)
    start = datetime(2026, 12, 3, 22, 30, tzinfo=UTC)  # 30 min into the 22:00 window
    assert capacity_pass(start)["leases_opened"] == 1
    lease = NodeLease.objects.get(schedule=schedule)
    assert lease.nodes.count() == schedule.count
    assert lease.ends_at == datetime(2026, 12, 4, 2, 0, tzinfo=UTC)
    assert capacity_pass(start + timedelta(hours=1))["leases_opened"] == 0
    assert capacity_pass(datetime(2026, 12, 4, 12, 0, tzinfo=UTC))["leases_opened"] == 0
    # Next night every inference node is busy: no lease, an alert.
    Node.objects.filter(pool__name="inference-agent").update(state=Node.State.DRAINED)
    assert capacity_pass(datetime(2026, 12, 4, 22, 5, tzinfo=UTC))["leases_opened"] == 0
    alert = Alert.objects.get(kind=Alert.Kind.LEASE)
    assert "scheduled lease not opened" in alert.subject
    assert any("scheduled lease not opened" in m.subject for m in mail.outbox)


def test_leases_api_lists_history_and_only_admins_lend(admin_api, api):
    response = admin_api.post(
        "/api/v1/leases/",
        {"pool": "inference-agent", "queue": "training", "count": 2, "until": "4h"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["pool"], body["queue"], body["state"], len(body["nodes"])) == (
        "inference-agent",
        "training",
        "active",
        2,
    )
    assert (
        api.post(
            "/api/v1/leases/",
            {"pool": "inference-agent", "queue": "training", "count": 1, "until": "1h"},
            format="json",
        ).status_code
        == 403
    )
    bad = admin_api.post(
        "/api/v1/leases/",
        {"pool": "inference-agent", "queue": "training", "count": "two", "until": "1h"},
        format="json",
    )
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["field"] == "count"
    capacity_pass(timezone.now() + timedelta(hours=5))  # it ends
    listed = admin_api.get("/api/v1/leases/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [r["state"] for r in rows] == ["ended"]
    assert admin_api.get("/api/v1/leases/?state=nonsense").status_code == 400


def test_an_admin_ends_a_lease_early_and_the_next_pass_takes_the_nodes_back(
    admin_api, api, django_capture_on_commit_callbacks
):
    lease = lend(1)
    [lent] = [n.name for n in lease.nodes.all()]
    task = run_on(submit_queued(api, "borrower", **TRAINING), lent)
    assert api.post(f"/api/v1/leases/{lease.pk}/end/").status_code == 404  # not theirs to see
    assert admin_api.post("/api/v1/leases/999999/end/").status_code == 404
    response = admin_api.post(f"/api/v1/leases/{lease.pk}/end/")
    assert response.status_code == 200, response.json()
    assert response.json()["reason"].endswith("ended early by admin")
    assert capacity_pass(later())["leases_reclaimed"] == 1
    task.refresh_from_db()
    assert (task.state, task.preemptions) == ("pending", 1)
    again = admin_api.post(f"/api/v1/leases/{lease.pk}/end/")
    assert again.status_code == 409 and again.json()["errors"][0]["field"] == "state"


def test_the_capacity_page_is_for_platform_admins(site, browser):
    lend(1)
    admin = Client_for(User.objects.filter(is_superuser=True).first())
    page = admin.get("/capacity/")
    assert page.status_code == 200
    assert b"lease" in page.content.lower()
    assert browser.get("/capacity/").status_code in (403, 404)


def Client_for(user):  # noqa: N802 - reads like a constructor
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


# -- health -------------------------------------------------------------------------------


def test_an_unhealthy_node_is_drained_with_its_reason_and_an_alert(site):
    get_backend("fake").set_health("inf003", NodeHealth(ok=False, reason="GPU 0 at 95 °C"))
    assert health_pass() == {"drained": 1, "failed": 0}
    node = Node.objects.get(name="inf003")
    assert node.state == "drained" and node.health["reason"] == "GPU 0 at 95 °C"
    assert ("drain", ("inf003", "GPU 0 at 95 °C")) in get_backend("fake").calls
    assert Alert.objects.filter(kind=Alert.Kind.NODE, node=node).count() == 1
    [message] = [m for m in mail.outbox if "inf003" in m.subject]
    assert "GPU 0 at 95 °C" in message.subject
    # A second check does not drain or alert again.
    assert health_pass() == {"drained": 0, "failed": 0}
    assert Alert.objects.filter(kind=Alert.Kind.NODE).count() == 1
    site_view_invalidate()
    assert not {n.name: n for n in site_view().pool_nodes["inference-agent"]}["inf003"].available


def test_a_node_that_is_down_loses_its_work_which_is_retried_elsewhere(api, site):
    task = run_on(submit_queued(api, "victim", retry_count=1, **INFERENCE), "inf002")
    get_backend("fake").set_health("inf002", NodeHealth(ok=False, down=True, reason="no answer"))
    assert health_pass() == {"drained": 1, "failed": 1}
    task.refresh_from_db()
    assert task.state == "pending" and task.attempts == 1
    first = Attempt.objects.get(task=task, number=1)
    assert first.state == "failed" and "no answer" in first.reason
    assert task.not_before is not None  # after the retry's back-off
    Task.objects.filter(pk=task.pk).update(not_before=None)
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    assert (task.state, task.attempts) == ("queued", 2)
    assert Node.objects.get(name="inf002").state == "down"


def test_a_drain_or_resume_from_the_portal_reaches_the_backend(site):
    node = Node.objects.get(name="inf004")
    services.nodes_set_state(nodes=[node], state="drained", reason="fan", by="root")
    nodes_apply([node.pk])
    assert ("drain", ("inf004", "fan (root)")) in get_backend("fake").calls
    services.nodes_set_state(nodes=[node], state="up", reason="", by="root")
    nodes_apply([node.pk])
    assert ("resume", ("inf004",)) in get_backend("fake").calls
    assert Node.objects.get(pk=node.pk).health == {}


def test_a_node_marked_down_fails_its_work(api, site):
    task = run_on(submit_queued(api, "on-bad-node", **INFERENCE), "inf005")
    node = Node.objects.get(name="inf005")
    services.nodes_set_state(nodes=[node], state="down", reason="pulled", by="root")
    nodes_apply([node.pk])
    task.refresh_from_db()
    assert task.state == "failed"
    assert "inf005" in task.reason


# -- start-up timeouts ----------------------------------------------------------------------


def test_a_task_not_started_in_time_is_alerted_and_resubmitted(api, site):
    task = submit_queued(api, "slow-start", **INFERENCE)
    assert capacity_pass(later(60))["startup_timeouts"] == 0
    assert capacity_pass(later(301))["startup_timeouts"] == 1
    task.refresh_from_db()
    assert task.state == "pending" and task.preemptions == 1
    assert "not started within 5min" in task.reason
    assert Alert.objects.filter(kind=Alert.Kind.STARTUP, task=task).count() == 1
    # A queue that does not resubmit only says why.
    Queue.objects.filter(name="inference-agent").update(startup_resubmit=False)
    other = submit_queued(api, "stuck", **INFERENCE)
    assert capacity_pass(later(301))["startup_timeouts"] == 1
    other.refresh_from_db()
    assert other.state == "queued" and other.reason.startswith("not started within 5min")


def test_a_task_waiting_for_room_is_not_timed_out(api, one_inference_node):
    for i in range(4):
        run_on(submit_queued(api, f"busy{i}", **INFERENCE), "inf001")
    waiting = submit_queued(api, "waits-its-turn", **INFERENCE)
    assert capacity_pass(later(301))["startup_timeouts"] == 0
    waiting.refresh_from_db()
    assert waiting.state == "queued" and not Alert.objects.filter(task=waiting).exists()
