"""What each role may see of what is not theirs: leases, simulations, priority requests and
accounts (docs/security.md). The access matrix (tests/unit/portal/access_matrix/) checks
every verb; these check the contents of lists and the answers that must not differ."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.models import Membership
from scheduling.models import NodeLease, Pool, Queue, Task
from scheduling.services.capacity import open_lease
from simulation.models import SimulationRun
from simulation.replay import history_workload
from tests.conftest import descriptor, submit


def _api(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def _page(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


@pytest.fixture
def hpc_admin(site) -> User:
    """The demo queue admin, made admin of queue hpc (pool cpu-hpc) alone."""
    quinn = User.objects.get(username="quinn")
    quinn.administered_queues.set([Queue.objects.get(name="hpc")])
    return quinn


def _lend(pool: str, queue: str, count: int = 1) -> NodeLease:
    return open_lease(
        pool=Pool.objects.get(name=pool),
        queue=Queue.objects.select_related("pool").get(name=queue),
        count=count,
        duration_s=3600,
        reason="night shift",
    )


# -- leases ---------------------------------------------------------------------------------


@pytest.fixture
def leases(hpc_admin) -> dict[str, NodeLease]:
    return {
        "foreign": _lend("inference-agent", "training"),  # touches no pool of queue hpc
        "into_hpc": _lend("inference-agent", "hpc"),  # lent to queue hpc
        "out_of_hpc": _lend("cpu-hpc", "training"),  # lent out of hpc's pool
    }


def _ids(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {row["id"] for row in response.json()["results"]}


def test_researchers_and_finance_see_no_lease_at_all(leases):
    for username in ("alice", "bob", "finn"):
        api = _api(username)
        assert _ids(api.get("/api/v1/leases/")) == set(), username
        assert _ids(api.get("/api/v1/leases/?state=active")) == set(), username
        for lease in leases.values():
            assert api.get(f"/api/v1/leases/{lease.pk}/").status_code == 404
            # Ending one they cannot see is the same 404 as ending one that does not exist.
            assert api.post(f"/api/v1/leases/{lease.pk}/end/").status_code == 404
            assert api.post("/api/v1/leases/99999/end/").status_code == 404
    assert NodeLease.objects.filter(state="active").count() == 3


def test_a_queue_admin_sees_the_leases_of_their_queues_pools_as_the_capacity_page_does(leases):
    api = _api("quinn")
    mine = {leases["into_hpc"].pk, leases["out_of_hpc"].pk}
    assert _ids(api.get("/api/v1/leases/")) == mine
    shown = api.get(f"/api/v1/leases/{leases['into_hpc'].pk}/")
    assert shown.status_code == 200 and shown.json()["queue"] == "hpc"
    assert api.get(f"/api/v1/leases/{leases['foreign'].pk}/").status_code == 404
    # They see it, but only a platform admin ends a lease.
    assert api.post(f"/api/v1/leases/{leases['into_hpc'].pk}/end/").status_code == 403
    page = _page("quinn").get("/capacity/").content.decode()
    [lent_in] = leases["into_hpc"].nodes.all()
    [lent_elsewhere] = leases["foreign"].nodes.all()
    assert lent_in.name in page and lent_elsewhere.name not in page


def test_a_platform_admin_sees_every_lease(leases):
    assert _ids(_api("admin").get("/api/v1/leases/")) == {lease.pk for lease in leases.values()}
    body = _api("admin").get(f"/api/v1/leases/{leases['foreign'].pk}/").json()
    assert (body["reason"], len(body["nodes"])) == ("night shift", 1)
    assert _api("admin").get("/api/v1/leases/9223372036854775807/").status_code == 404


# -- simulations --------------------------------------------------------------------------


def _run(workload: str, by: str, **parameters) -> SimulationRun:
    return SimulationRun.objects.create(
        workload=workload,
        parameters={"policies": ["fifo"], **parameters},
        created_by=User.objects.get(username=by),
    )


@pytest.fixture
def runs(hpc_admin) -> dict[str, SimulationRun]:
    return {
        "site_replay": _run("history", "admin", days=7),  # the whole site
        "hpc_replay": _run("history", "admin", days=7, queues=["hpc"]),
        "training_replay": _run("history", "admin", days=7, queues=["training"]),
        "mixed_replay": _run("history", "admin", days=7, queues=["hpc", "training"]),
        "model": _run("launch-mix", "admin", seed=1),  # no portal data in it
        "trace": _run("swf", "admin"),  # another operator's upload
    }


def test_a_queue_admin_sees_only_simulations_of_their_queues(runs):
    page = _page("quinn")
    listing = page.get("/simulations/").content.decode()
    shown = {name for name, run in runs.items() if f'id="simulation-{run.pk}"' in listing}
    assert shown == {"hpc_replay", "model"}
    for name, run in runs.items():
        status = page.get(f"/simulations/{run.pk}/").status_code
        assert status == (200 if name in shown else 404), name
        progress = page.get(f"/simulations/{run.pk}/progress/").status_code
        assert progress == (200 if name in shown else 404), name
    site_pk, hpc_pk = runs["site_replay"].pk, runs["hpc_replay"].pk
    assert page.get(f"/simulations/compare/?run={hpc_pk}&run={site_pk}").status_code == 404
    # A platform admin sees every run, the whole site's replay included.
    listing = _page("admin").get("/simulations/").content.decode()
    assert all(f'id="simulation-{run.pk}"' in listing for run in runs.values())


def test_a_queue_admins_history_replay_is_of_their_queues_never_the_whole_site(
    hpc_admin, django_capture_on_commit_callbacks
):
    page = _page("quinn")
    with django_capture_on_commit_callbacks():
        started = page.post("/simulations/", {"workload": "history", "policies": "fifo"})
    assert started.status_code == 302, started.content.decode()[-2000:]
    run = SimulationRun.objects.get()
    assert run.parameters["queues"] == ["hpc"]
    assert "queues hpc" in page.get("/simulations/").content.decode()
    refused = page.post(
        "/simulations/", {"workload": "history", "policies": "fifo", "queues": "training"}
    )
    assert refused.status_code == 400
    assert "a replay of other queues or of the whole site is a platform admin" in (
        refused.content.decode()
    )
    assert SimulationRun.objects.count() == 1
    # A platform admin's replay with no queue ticked is the whole site's.
    with django_capture_on_commit_callbacks():
        _page("admin").post("/simulations/", {"workload": "history", "policies": "fifo"})
    assert "queues" not in SimulationRun.objects.order_by("-id").first().parameters


def test_a_replay_of_some_queues_reads_only_their_tasks(hpc_admin, researcher):
    api = _api("alice")
    for doc in (
        descriptor(name="in-hpc", type="hpc-simulation", queue="hpc"),
        descriptor(name="in-agents", type="agent"),
    ):
        assert submit(api, doc).status_code == 201
    now = timezone.now()
    Task.objects.update(started_at=now - timedelta(minutes=5), ended_at=now)
    every, _, _ = history_workload(1, now=now + timedelta(seconds=1))
    hpc_only, _, _ = history_workload(1, now=now + timedelta(seconds=1), queues=["hpc"])
    assert sorted(job.queue for job in every) == ["hpc", "inference-agent"]
    assert [job.queue for job in hpc_only] == ["hpc"]


# -- project members ------------------------------------------------------------------------


def test_adding_a_member_tells_a_lead_nothing_about_accounts_they_may_not_add(site):
    User.objects.create_user("gone", password="x", is_active=False)
    User.objects.create_user("ursula", password="x")  # a researcher with no project yet
    lead = _api("alice")
    answers = {}
    for username in ("finn", "admin", "gone", "no-such-user", "ursul", "URSULA"):
        response = lead.post(
            "/api/v1/projects/materials/members/", {"username": username}, format="json"
        )
        body = response.json()
        assert body["errors"][0]["got"] == username
        body["errors"][0]["got"] = None
        answers[username] = (response.status_code, body)
    assert len(set(map(repr, answers.values()))) == 1, answers  # one answer for all of them
    assert answers["finn"][0] == 400
    assert not Membership.objects.filter(
        project__slug="materials", user__username__in=["finn", "admin", "gone"]
    ).exists()
    # The page says the same for finance as for a name nobody has.
    page = _page("alice")
    for username in ("finn", "no-such-user"):
        followed = page.post(
            "/projects/materials/members/", {"username": username}, follow=True
        ).content.decode()
        assert "no researcher&#x27;s account has this exact username" in followed
    # The exact username of a researcher is added.
    added = lead.post("/api/v1/projects/materials/members/", {"username": "ursula"}, format="json")
    assert added.status_code == 201
