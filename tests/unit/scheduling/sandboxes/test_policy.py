"""The elastic queue's policy applied to live sandboxes: max_concurrency queues or refuses
as the queue says, the idle timeout ends a sandbox, its lifetime is its walltime, and the
network allow-list is the queue's and the project's (docs/sandboxes.md)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.models import Project
from scheduling.backends.base import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import backend_poll
from scheduling.engine import sandboxes as door
from scheduling.engine.dispatch import claim_many, dispatch_claimed_many, task_dispatch
from scheduling.models import Queue, Sandbox, SandboxExec, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import descriptor, submit
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


def _queue(**values) -> None:
    Queue.objects.filter(name="inference-agent").update(**values)
    site_view_invalidate()


def test_over_max_concurrency_a_refusing_queue_answers_409_with_the_reason(api):
    _queue(max_concurrency=2, over_concurrency="refuse")
    assert [create(api).status_code for _ in range(2)] == [201, 201]
    refused = create(api)
    assert refused.status_code == 409, refused.content
    message = refused.json()["errors"][0]["message"]
    assert "inference-agent runs its maximum of 2 jobs" in message
    assert Sandbox.objects.count() == 2  # nothing stored for the refused one


def test_over_max_concurrency_a_queueing_queue_keeps_it_queued_until_one_ends(api):
    _queue(max_concurrency=1, over_concurrency="queue")
    first = create(api).json()["id"]
    waiting = create(api)
    assert waiting.status_code == 202 and waiting.json()["state"] == "queued", waiting.content
    sid = waiting.json()["id"]
    task = Task.objects.get(sandbox__public_id=sid)
    assert task.state == "pending" and "maximum of 1 jobs" in task.reason
    assert run(api, sid, ["true"]).status_code == 409  # not ready: nothing to exec in
    # The fake backend is a cluster's kind (not this host's): nothing reached it.
    assert task.key not in FakeBackend.jobs_for("fake")
    api.delete(f"/api/v1/sandboxes/{first}/")
    assert task_dispatch(task.pk) == "submitted"  # what the pending sweep does
    shown = api.get(f"/api/v1/sandboxes/{sid}/").json()
    assert shown["state"] == "ready", shown


def test_max_concurrency_holds_batch_tasks_back_from_a_cluster_backend_too(api):
    _queue(max_concurrency=1)
    ids = [submit(api, descriptor(name=f"a{i}", type="agent")).json()["id"] for i in range(2)]
    outcomes = [task_dispatch(pk) for pk in ids]
    assert outcomes == ["submitted", "capped"]
    assert len(FakeBackend.jobs_for("fake")) == 1
    assert Task.objects.get(pk=ids[1]).reason.startswith("waiting: queue inference-agent")


def test_a_sandbox_idle_past_its_timeout_is_ended_and_its_job_cancelled(api):
    sid = create(api, idle_timeout_s=5).json()["id"]
    assert run(api, sid, ["echo", "hi"]).json()["stdout"] == "hi\n"
    sandbox = Sandbox.objects.get(public_id=sid)
    assert door.reclaim(now=timezone.now() + timedelta(seconds=4)) == 0
    assert door.reclaim(now=timezone.now() + timedelta(seconds=6)) == 1
    sandbox.refresh_from_db()
    assert (sandbox.state, sandbox.end_reason) == ("ended", "idle")
    job = FakeBackend.jobs_for("fake")[sandbox.task.key]
    assert job.state.value == "cancelled"
    assert sandbox.exec_count == 1


def test_an_exec_in_flight_keeps_its_sandbox_from_the_idle_reclaim(api):
    sid = create(api, idle_timeout_s=5).json()["id"]
    sandbox = Sandbox.objects.get(public_id=sid)
    now = timezone.now()
    SandboxExec.objects.create(
        sandbox=sandbox, argv=["sleep", "60"], started_at=now, deadline=now + timedelta(seconds=65)
    )
    assert door.reclaim(now=now + timedelta(seconds=30)) == 0


def test_the_idle_timeout_asked_may_not_exceed_the_queues(api):
    too_long = create(api, idle_timeout_s=121)
    assert too_long.status_code == 400
    error = too_long.json()["errors"][0]
    assert (error["field"], error["got"]) == ("idle_timeout_s", 121)
    assert "from 1 to 120" in error["message"]


def test_the_lifetime_is_the_walltime_and_its_end_ends_the_sandbox(api):
    sid = create(api, max_lifetime_s=60).json()["id"]
    task = Task.objects.get(sandbox__public_id=sid)
    assert task.spec["walltime_s"] == 60
    FakeBackend(alias="fake").finish(task.backend_id, JobState.TIMEOUT)
    backend_poll("fake")
    shown = api.get(f"/api/v1/sandboxes/{sid}/").json()
    assert (shown["state"], shown["end_reason"]) == ("ended", "max lifetime")


def test_network_outside_the_allow_lists_is_refused_naming_the_host(api):
    refused = create(api, network={"allow": ["api.example.org:443"]})
    assert refused.status_code == 400
    error = refused.json()["errors"][0]
    assert (error["field"], error["got"]) == ("network.allow", "api.example.org:443")
    _queue(egress_allow=["pypi.example.org:443"])
    project = Project.objects.get(slug="materials")
    project.sandbox_egress = ["api.example.org:443"]
    project.save()
    made = create(api, network={"allow": ["api.example.org:443", "pypi.example.org:443"]})
    assert made.status_code == 201, made.content
    task = Task.objects.get(sandbox__public_id=made.json()["id"])
    assert task.spec["egress"] == ["api.example.org:443", "pypi.example.org:443"]


@pytest.mark.parametrize(
    "network, field",
    [
        ({"allow": ["10.0.0.1:443"]}, "network.allow[0]"),
        ({"allow": ["api.example.org"]}, "network.allow[0]"),
        ({"allow": ["api.example.org:99999"]}, "network.allow[0]"),
        ({"deny": []}, "network"),
    ],
)
def test_a_malformed_network_policy_names_the_field(api, network, field):
    refused = create(api, network=network)
    assert refused.status_code == 400
    assert refused.json()["errors"][0]["field"] == field


def test_the_queue_validates_its_sandbox_settings():
    from django.core.exceptions import ValidationError

    queue = Queue(name="q", egress_allow=["1.2.3.4:80"], warm_pool={"": -1})
    with pytest.raises(ValidationError) as caught:
        queue.clean()
    assert set(caught.value.message_dict) == {"egress_allow", "warm_pool"}


def test_a_task_let_through_counts_before_its_job_exists(api):
    # Two dispatched together: the first is let through (admitted) before any job is made,
    # so the second already counts it and stays pending.
    _queue(max_concurrency=1)
    ids = [submit(api, descriptor(name=f"b{i}", type="agent")).json()["id"] for i in range(2)]
    outcomes = dispatch_claimed_many(claim_many(ids))
    assert sorted(outcomes.values()) == ["capped", "submitted"]
    assert len(FakeBackend.jobs_for("fake")) == 1


def test_an_allowed_name_that_leads_to_the_portals_own_web_port_is_refused(api, settings):
    settings.SWITCHYARD_PUBLIC_URL = "http://localhost:8000"
    _queue(egress_allow=["localhost:8000"])
    refused = create(api, network={"allow": ["localhost:8000"]})
    assert refused.status_code == 400, refused.content
    error = refused.json()["errors"][0]
    assert error["field"] == "network.allow" and "localhost:8000" in error["message"]
