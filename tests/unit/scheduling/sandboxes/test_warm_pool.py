"""The warm pool: the beat keeps each backend's pools as the queues say, a create claims a
warm sandbox instead of submitting, and a template unused for the idle time scales to zero."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.backends.base import WarmSpec
from scheduling.backends.fake import FakeBackend
from scheduling.engine import sandboxes as door
from scheduling.models import Queue
from tests.unit.scheduling.sandboxes.helpers import create

pytestmark = pytest.mark.django_db


def _calls(name: str) -> list:
    return [args for method, args in FakeBackend(alias="fake").calls if method == name]


def test_the_beat_keeps_the_queues_warm_pools_and_a_create_claims_one(api):
    assert door.warm_pass() == {"fake": 2}
    assert _calls("keep_warm")[-1] == ((WarmSpec("", 1, 1024, 2),),)
    made = create(api)
    assert made.status_code == 201
    assert len(_calls("claim_warm")) == 1
    assert not [a for m, a in FakeBackend(alias="fake").calls if m == "submit"]
    # Another shape has no warm sandbox: it is submitted.
    assert create(api, cpus=2).status_code == 201
    assert len([m for m, _ in FakeBackend(alias="fake").calls if m == "submit"]) == 1


def test_a_template_none_was_created_from_within_the_idle_time_scales_to_zero(api):
    now = timezone.now()
    door.warm_pass(now=now)
    later = now + timedelta(seconds=121)
    door.warm_pass(now=later)
    assert _calls("keep_warm")[-1] == ((WarmSpec("", 1, 1024, 0),),)
    create(api)  # a cold create: the next pass warms the pool again
    door.warm_pass(now=timezone.now())
    assert _calls("keep_warm")[-1] == ((WarmSpec("", 1, 1024, 2),),)


def test_a_queue_without_a_warm_pool_asks_for_nothing(site):
    Queue.objects.update(warm_pool={})
    assert door.warm_pass() == {}
    assert _calls("keep_warm") == []


def test_an_image_template_is_kept_warm_under_the_name_its_sandboxes_run(site, settings):
    # A submission names an image in full (`spec.image`); the pool must use that name, or no
    # claim would ever match it.
    settings.SWITCHYARD_IMAGE_REGISTRY = "registry.example.org"
    Queue.objects.filter(name="inference-agent").update(
        warm_pool={"demo/python:3": 1, "not a reference": 1}
    )
    door.warm_pass()
    assert _calls("keep_warm")[-1] == (
        (WarmSpec("registry.example.org/demo/python:3", 1, 1024, 1),),
    )
