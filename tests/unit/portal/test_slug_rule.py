"""One rule for a project's slug and a queue's name: what the admin console stores, every
descriptor can name, and the API's filters say so when a value cannot be one."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from rest_framework.test import APIClient

from portal.models import Project
from scheduling.descriptor import DescriptorError, parse_task
from scheduling.models import Pool, Queue
from tests.conftest import descriptor

CANDIDATES = ["-x", "_x", "x-", "x", "X_1-b", "a" * 63, "a" * 64, "x.y", "é", "x y", ""]


def _descriptor_takes(slug: str) -> bool:
    try:
        parse_task(descriptor(project=slug, queue=slug))
    except DescriptorError as exc:
        fields = {e.field for e in exc.errors}
        assert fields <= {"project", "queue"}, fields
        return False
    return True


def _model_takes(instance) -> bool:
    try:
        instance.full_clean(exclude=["pool", "pi"])
    except ValidationError as exc:
        return not ({"slug", "name"} & set(exc.message_dict))
    return True


@pytest.mark.django_db
def test_the_models_take_exactly_the_slugs_every_descriptor_takes():
    pool = Pool.objects.create(name="p")
    for slug in CANDIDATES:
        expected = _descriptor_takes(slug)
        assert _model_takes(Project(slug=slug, name="n")) == expected, slug
        assert _model_takes(Queue(name=slug, pool=pool)) == expected, slug


def test_the_admin_console_refuses_a_project_slug_no_descriptor_could_name(site):
    page = Client()
    page.force_login(User.objects.get(username="admin"))
    form = page.get("/admin/portal/project/add/").content.decode()
    management = dict(
        re.findall(
            r'name="([\w-]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"'
            r'[^>]*value="(\d*)"',
            form,
        )
    )
    pi = User.objects.get(username="alice").pk
    data = {**management, "name": "Broken", "pi": pi, "share": 1, "change_reason": "new group"}
    for key in [k for k in management if k.endswith("TOTAL_FORMS")]:
        data[key] = "0"
    refused = page.post("/admin/portal/project/add/", {**data, "slug": "-x"})
    assert refused.status_code == 200
    assert "starting with a letter or digit" in refused.content.decode()
    assert not Project.objects.filter(slug="-x").exists()
    kept = page.post("/admin/portal/project/add/", {**data, "slug": "x-1"})
    assert kept.status_code == 302 and Project.objects.filter(slug="x-1").exists()


@pytest.mark.parametrize("path", ["/api/v1/tasks/", "/api/v1/usage/"])
def test_the_api_refuses_a_project_or_queue_filter_no_descriptor_could_name(site, path):
    api = APIClient()
    api.force_authenticate(User.objects.get(username="admin"))
    for name in ("project", "queue"):
        response = api.get(path, {name: "-x"})
        assert response.status_code == 400, response.content
        [error] = response.json()["errors"]
        assert (error["field"], error["got"]) == (name, "-x")
        assert "starting with a letter or digit" in error["message"]
