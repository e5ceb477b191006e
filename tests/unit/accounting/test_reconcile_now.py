"""Reconcile now: the request asks a worker and answers at once; one at a time.

The backends' accounting (sacct on Slurm) is read by the worker, never inside the request
that asked for it; while one asked for is queued or running, asking again starts nothing.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from accounting.models import Reconciliation
from accounting.services import RECONCILE_NOW
from scheduling import usage
from scheduling.backends.fake import FakeBackend

pytestmark = pytest.mark.django_db


@pytest.fixture
def accounted(monkeypatch) -> list[str]:
    """The backends whose accounting was read, in order."""
    calls: list[str] = []
    real = FakeBackend.accounted
    monkeypatch.setattr(
        FakeBackend, "accounted", lambda self, s, e: (calls.append(self.alias), real(self, s, e))[1]
    )
    return calls


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    names: list[str] = []
    real = usage.send
    monkeypatch.setattr(
        usage, "send", lambda name, args, **kw: (names.append(name), real(name, args, **kw))
    )
    return names


def _admin_page() -> Client:
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    return client


def _admin_api() -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


def test_the_page_asks_a_worker_and_reads_no_backend_in_the_request(site, worker, accounted):
    admin = _admin_page()
    with worker():
        r = admin.post("/usage/reconciliation/run/")
        assert r.status_code == 302 and r["Location"].endswith("/usage/reconciliation/")
        assert accounted == []  # the request has answered; the worker has not run yet
        assert not Reconciliation.objects.exists()
    assert accounted == ["fake"]
    assert list(Reconciliation.objects.values_list("backend", flat=True)) == ["fake"]
    page = admin.get("/usage/reconciliation/").content.decode()
    assert "Reconciliation started" in page


def test_the_api_answers_202_at_once_and_refuses_a_second_while_one_is_pending(
    site, django_capture_on_commit_callbacks, worker, accounted, sent
):
    api = _admin_api()
    with django_capture_on_commit_callbacks(execute=False) as queued:
        first = api.post("/api/v1/usage/reconciliations/")
    assert first.status_code == 202, first.json()
    assert first.json()["results"] == "/api/v1/usage/reconciliations/"
    assert first.json()["started_at"]
    assert len(queued) == 1 and accounted == []
    # Hammering: nothing new is queued while the first is pending, page or API.
    with django_capture_on_commit_callbacks(execute=False) as again:
        second = api.post("/api/v1/usage/reconciliations/")
        page = _admin_page().post("/usage/reconciliation/run/", follow=True)
    assert second.status_code == 409, second.json()
    assert "still queued or running" in second.json()["errors"][0]["message"]
    assert "still queued or running" in page.content.decode()
    assert again == []
    with worker():
        queued[0]()  # the worker takes the first message
    assert sent == [RECONCILE_NOW] and accounted == ["fake"]
    assert api.get("/api/v1/usage/reconciliations/").json()[0]["backend"] == "fake"
    # Done: the next ask starts another.
    with worker():
        assert api.post("/api/v1/usage/reconciliations/").status_code == 202
    assert accounted == ["fake", "fake"]
