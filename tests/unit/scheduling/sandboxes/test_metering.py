"""A live sandbox is metered by the instance-minute from its creation (the warm claim or
its start) to its end, once, to the second of its lifetime (docs/sandboxes.md, "Billing")."""

from __future__ import annotations

import time

import pytest

from accounting.meter import meter
from accounting.models import UsageRecord
from scheduling.engine import sandboxes as door
from scheduling.models import Attempt, Sandbox
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("warm", [False, True])
def test_metering_equals_the_lifetime_to_the_second(api, warm):
    if warm:
        door.warm_pass()  # the default site keeps {"": 2} warm in inference-agent
    sid = create(api).json()["id"]
    assert run(api, sid, ["true"]).status_code == 200
    time.sleep(1.2)
    assert api.delete(f"/api/v1/sandboxes/{sid}/").status_code == 200
    sandbox = Sandbox.objects.get(public_id=sid)
    attempt = Attempt.objects.get(task=sandbox.task)
    assert meter([attempt.pk]) > 0
    assert meter([attempt.pk]) == 0  # once
    instance = UsageRecord.objects.get(attempt=attempt, metric="instance")
    lifetime_ms = (sandbox.ended_at - sandbox.ready_at).total_seconds() * 1000
    assert lifetime_ms > 1200
    assert abs(instance.quantity - lifetime_ms) < 1000, (instance.quantity, lifetime_ms)
    # What the API showed as instance-minutes is the same lifetime.
    shown = api.get(f"/api/v1/sandboxes/{sid}/").json()["instance_minutes"]
    assert abs(shown * 60_000 - instance.quantity) < 1000
    # A warm sandbox's start is its claim: it is billed from the create, not from its warm-up.
    assert abs((sandbox.ready_at - sandbox.created_at).total_seconds()) < 1
