"""The admin console does not change a project's members: a removal there would skip the
members page's service (no audit row, no message taking the account out of the project's Unix
group), so it shows them read-only with a link to that page (docs/security.md)."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from django.forms.models import model_to_dict
from django.test import Client

from portal.models import Membership, Project


def test_the_admin_console_shows_members_but_does_not_remove_them(site):
    page = Client()
    page.force_login(User.objects.get(username="admin"))
    project = Project.objects.get(slug="materials")
    url = f"/admin/portal/project/{project.pk}/change/"
    form = page.get(url).content.decode()
    assert 'href="/projects/materials/members/"' in form
    leaver = Membership.objects.create(project=project, user=User.objects.get(username="bob"))
    before = set(project.memberships.values_list("pk", flat=True))
    # The POST the old inline took to delete a member: every row as it is, one marked DELETE.
    management = dict(
        re.findall(
            r'name="([\w-]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"[^>]*value="(\d*)"', form
        )
    )
    for key in [k for k in management if k.endswith(("TOTAL_FORMS", "INITIAL_FORMS"))]:
        management[key] = "0"  # the other inlines (quotas) left as they are
    data = {
        **management,
        **{k: v for k, v in model_to_dict(project).items() if v is not None},
        "memberships-TOTAL_FORMS": len(before),
        "memberships-INITIAL_FORMS": len(before),
        "change_reason": "bob leaves",
    }
    for index, membership in enumerate(project.memberships.order_by("pk")):
        data[f"memberships-{index}-id"] = membership.pk
        data[f"memberships-{index}-project"] = project.pk
        data[f"memberships-{index}-user"] = membership.user_id
        data[f"memberships-{index}-role"] = membership.role
        if membership.pk == leaver.pk:
            data[f"memberships-{index}-DELETE"] = "on"
    done = page.post(url, data)
    assert done.status_code == 302, re.findall(r"errorlist[^<]*<li>([^<]*)", done.content.decode())
    assert set(project.memberships.values_list("pk", flat=True)) == before


def test_a_project_made_in_the_admin_console_has_its_lead_as_member(site):
    page = Client()
    page.force_login(User.objects.get(username="admin"))
    form = page.get("/admin/portal/project/add/").content.decode()
    management = dict(
        re.findall(
            r'name="([\w-]+-(?:TOTAL|INITIAL|MIN_NUM|MAX_NUM)_FORMS)"[^>]*value="(\d*)"', form
        )
    )
    alice = User.objects.get(username="alice")
    for key in [k for k in management if k.endswith("TOTAL_FORMS")]:
        management[key] = "0"
    data = {**management, "slug": "made-here", "name": "Made", "pi": alice.pk, "share": 1}
    data["change_reason"] = "a new group"
    assert page.post("/admin/portal/project/add/", data).status_code == 302
    made = Project.objects.get(slug="made-here")
    assert list(made.memberships.values_list("user__username", "role")) == [("alice", "pi")]
