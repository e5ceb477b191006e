"""What each role may see of what is not theirs: leases, simulations, priority requests and
accounts (docs/security.md). The access matrix (tests/unit/portal/test_access_matrix.py) checks
every verb; these check the contents of lists and the answers that must not differ."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from scheduling.engine.capacity import open_lease
from scheduling.models import NodeLease, Pool, Queue


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
