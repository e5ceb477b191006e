"""The admin console keeps quotas and priority requests where they live (scheduling), and a
project's page still edits the project's quotas."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client

from scheduling.models import Quota


@pytest.fixture
def page(site) -> Client:
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    return client


def test_a_projects_admin_page_lists_its_quotas_and_its_members(page):
    quota = Quota.objects.select_related("project").first()
    html = page.get(f"/admin/portal/project/{quota.project.pk}/change/").content.decode()
    shown = {int(pk) for pk in re.findall(r'name="quotas-\d+-id" value="(\d+)"', html)}
    assert shown == set(quota.project.quotas.values_list("pk", flat=True))
    assert 'name="memberships-TOTAL_FORMS"' in html


@pytest.mark.parametrize("path", ["/admin/scheduling/quota/", "/admin/scheduling/priorityrequest/"])
def test_quotas_and_priority_requests_are_in_the_scheduling_section(page, path):
    assert page.get(path).status_code == 200
    assert page.get(path.replace("scheduling", "portal")).status_code == 404
