"""Creates racing past a queue's max_concurrency: however many arrive at once, no more than
the cap are ever started, and the rest are refused or queued as the queue says
(docs/sandboxes.md, "Limits and policy"). Each create in its own thread and database
connection, as web processes are."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from rest_framework.test import APIClient

from scheduling.models import Queue, Sandbox
from scheduling.selectors import site_view_invalidate
from tests.unit.scheduling.sandboxes.helpers import create

pytestmark = pytest.mark.django_db(transaction=True)


def racing_creates(user, count: int) -> list[int]:
    """`count` creates let go at the same moment; their status codes."""
    gate = threading.Barrier(count)
    codes: list[int] = []

    def one() -> None:
        client = APIClient()
        client.force_authenticate(user)
        try:
            gate.wait()
            codes.append(create(client).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return codes


@pytest.mark.parametrize("over, held", [("refuse", 409), ("queue", 202)])
def test_creates_racing_past_the_cap_start_no_more_than_it(researcher, settings, over, held):
    settings.SWITCHYARD_SANDBOX_CALLS_PER_USER = 100  # one process plays many here
    Queue.objects.filter(name="inference-agent").update(max_concurrency=3, over_concurrency=over)
    site_view_invalidate()
    codes = racing_creates(researcher, 8)
    assert sorted(codes) == [201] * 3 + [held] * 5, codes
    assert Sandbox.objects.filter(state="ready").count() == 3
