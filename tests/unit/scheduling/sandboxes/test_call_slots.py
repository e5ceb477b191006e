"""A user's sandbox calls in flight in one web process are bounded (docs/sandboxes.md,
"Throttling"): a call holds its web thread until the sandbox answers, so one user's slow or
dripping execs must not take every thread of the process from everyone else."""

from __future__ import annotations

import json

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections

from scheduling.models import Sandbox
from scheduling.services import sandbox_calls
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def three_per_user(settings):
    settings.SWITCHYARD_SANDBOX_CALLS_PER_USER = 3
    yield
    with sandbox_calls._lock:  # a test that failed midway leaves no slot held for the next
        sandbox_calls._held.clear()


def stream(api, sid: str, argv: list[str]):
    """A streamed exec whose answer is not read yet: its call holds a slot meanwhile."""
    response = api.post(
        f"/api/v1/sandboxes/{sid}/exec/?stream=1",
        data=json.dumps({"command": argv}),
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    return response


def client_gone(response) -> None:
    """The client hung up before reading its answer: the server closes the response (as
    Django's test client does for a stream it read, without closing the test's database)."""
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


def test_past_its_calls_in_flight_a_users_next_call_is_a_429_until_one_answers(api, researcher):
    sid = create(api).json()["id"]
    held = [stream(api, sid, ["echo", str(n)]) for n in range(3)]
    assert sandbox_calls.held(researcher.pk) == 3
    refused = run(api, sid, ["true"])
    assert refused.status_code == 429
    assert refused["Retry-After"] == "1"
    assert "at most 3 at once" in refused.json()["errors"][0]["message"]
    put = api.put(f"/api/v1/sandboxes/{sid}/files/a.txt", data=b"x", content_type="text/plain")
    assert put.status_code == 429
    # A create may wait for its start: refused before anything is stored.
    assert create(api).status_code == 429
    assert Sandbox.objects.count() == 1
    # A stream read to its end gives its slot back; one closed unread (its client gone)
    # gives it back too.
    lines = b"".join(held[0].streaming_content).splitlines()
    assert json.loads(lines[-1])["exit_code"] == 0
    client_gone(held[1])
    assert sandbox_calls.held(researcher.pk) == 1
    assert run(api, sid, ["true"]).status_code == 200
    client_gone(held[2])
    assert sandbox_calls.held(researcher.pk) == 0


def test_one_users_calls_in_flight_do_not_refuse_anothers(api, researcher, outsider_api):
    mine = create(api).json()["id"]
    theirs = create(outsider_api, project="genomics").json()["id"]
    held = [stream(api, mine, ["true"]) for _ in range(3)]
    assert run(api, mine, ["true"]).status_code == 429
    assert run(outsider_api, theirs, ["echo", "hi"]).json()["stdout"] == "hi\n"
    for response in held:
        client_gone(response)


def test_calls_that_fail_give_their_slot_back(api, researcher):
    sid = create(api).json()["id"]
    for _ in range(5):
        missing = api.get(f"/api/v1/sandboxes/{sid}/files/none.txt")
        assert missing.status_code == 404
    api.delete(f"/api/v1/sandboxes/{sid}/")
    for _ in range(5):
        assert run(api, sid, ["true"]).status_code == 409
    assert sandbox_calls.held(researcher.pk) == 0
