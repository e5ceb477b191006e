"""Asking for more allocation and deciding it: who may, the errors, the mail, the audit log
and the configuration history; the API and the pages (docs/accounting.md, Allocations)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from accounting.allocation_selectors import today
from accounting.models import Allocation, AllocationRequest
from portal.models import AuditEvent, ConfigVersion, Membership, Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def allocation(site) -> Allocation:
    day = today(timezone.now())
    return Allocation.objects.create(
        project=Project.objects.get(slug="materials"),
        name="materials 2026",
        starts=day - timedelta(days=10),
        ends=day + timedelta(days=20),
        gpu_hours=100,
        core_hours=1000,
    )


@pytest.fixture
def admin_api(site) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username="admin"))
    return client


@pytest.fixture
def member_api(site) -> APIClient:
    """bob as a plain member of materials (alice leads it)."""
    bob = User.objects.get(username="bob")
    Membership.objects.create(user=bob, project=Project.objects.get(slug="materials"))
    client = APIClient()
    client.force_authenticate(bob)
    return client


def _ask(client, **body):
    body = {"project": "materials", "justification": "the paper's last runs", **body}
    return client.post("/api/v1/allocations/requests/", body, format="json")


def test_a_lead_asks_the_admins_are_mailed_and_it_is_audited(api, allocation, mailoutbox):
    response = _ask(api, gpu_hours=50)
    assert response.status_code == 201, response.json()
    assert response.json()["state"] == "pending"
    assert [m.to for m in mailoutbox] == [["admin@example.org"]]
    assert "alice asks for 50 GPU-hours more for project materials" in mailoutbox[0].body
    row = AuditEvent.objects.get(action="allocation.request")
    assert (row.actor, row.project, row.detail["gpu_hours"]) == ("alice", "materials", 50)


def test_an_admin_approves_the_allocation_grows_versioned_and_the_lead_is_mailed(
    api, admin_api, allocation, mailoutbox
):
    asked = _ask(api, gpu_hours=50, ends=str(allocation.ends + timedelta(days=30))).json()
    mailoutbox.clear()
    response = admin_api.post(
        f"/api/v1/allocations/requests/{asked['id']}/approve/", {"comment": "ok"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert (response.json()["state"], response.json()["allocation"]) == ("approved", allocation.pk)
    allocation.refresh_from_db()
    assert (allocation.gpu_hours, allocation.core_hours) == (150, 1000)
    version = ConfigVersion.objects.get(model="accounting.allocation", action="update")
    assert version.reason == f"allocation request #{asked['id']} approved: ok"
    assert (version.before["gpu_hours"], version.after["gpu_hours"]) == (100, 150)
    assert AuditEvent.objects.filter(action="allocation.approve", actor="admin").exists()
    assert [m.to for m in mailoutbox] == [["alice@example.org"]]
    assert "was approved by admin" in mailoutbox[0].body
    detail = api.get(f"/api/v1/allocations/{allocation.pk}/").json()
    assert detail["resources"][0] == {
        "resource": "gpu_hours",
        "unit": "GPU-hours",
        "granted": 150,
        "used": 0.0,
        "remaining": 150.0,
    }


def test_a_rejection_changes_nothing_and_says_why(api, admin_api, allocation, mailoutbox):
    asked = _ask(api, core_hours=10).json()
    response = admin_api.post(
        f"/api/v1/allocations/requests/{asked['id']}/reject/",
        {"comment": "use the spare cycles first"},
        format="json",
    )
    assert response.json()["state"] == "rejected"
    allocation.refresh_from_db()
    assert allocation.core_hours == 1000
    assert "use the spare cycles first" in mailoutbox[-1].body


@pytest.mark.parametrize(
    ("body", "field", "got"),
    [
        ({"gpu_hours": -5}, "gpu_hours", "-5"),
        ({"gpu_hours": True}, "gpu_hours", "True"),
        ({"core_hours": "lots"}, "core_hours", "lots"),
        ({"ends": "next year"}, "ends", "next year"),
        ({"ends": "2001-01-01", "gpu_hours": 1}, "ends", "2001-01-01"),
        ({"gpu_hours": 0}, "gpu_hours", 0),
        ({"gpu_hours": 1, "justification": " "}, "justification", None),
        ({"gpu_hours": 1, "justification": ["why"]}, "justification", "['why']"),
        ({"gpu_hours": 1, "project": ["x"]}, "project", ["x"]),
    ],
)
def test_bad_requests_name_the_field_and_what_was_sent(api, allocation, body, field, got):
    response = _ask(api, **body)
    assert response.status_code == 400
    error = response.json()["errors"][0]
    assert (error["field"], error["got"]) == (field, got)


def test_with_no_current_allocation_a_renewal_must_say_until_when(api, site):
    response = _ask(api, gpu_hours=10)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "ends"


def test_only_the_lead_asks_and_only_a_platform_admin_decides(api, member_api, allocation):
    outsider_api = APIClient()  # quinn: a queue admin, no member of materials
    outsider_api.force_authenticate(User.objects.get(username="quinn"))
    assert _ask(member_api, gpu_hours=1).status_code == 403
    assert _ask(outsider_api, gpu_hours=1).status_code == 400  # not theirs: says nothing more
    asked = _ask(api, gpu_hours=1).json()
    assert _ask(api, gpu_hours=2).status_code == 409  # one pending per project
    approve = f"/api/v1/allocations/requests/{asked['id']}/approve/"
    assert member_api.post(approve).status_code == 403
    assert api.post(approve).status_code == 403  # the lead does not approve their own
    assert outsider_api.post(approve).status_code == 404
    assert outsider_api.get(f"/api/v1/allocations/{allocation.pk}/").status_code == 404
    assert outsider_api.get("/api/v1/allocations/").json()["results"] == []
    listed = api.get("/api/v1/allocations/?project=materials").json()
    assert (listed["count"], listed["results"][0]["state"]) == (1, "current")
    assert AllocationRequest.objects.get().state == "pending"


def test_an_admins_own_request_is_approved_by_another_admin(admin_api, allocation):
    asked = _ask(admin_api, gpu_hours=1).json()
    response = admin_api.post(f"/api/v1/allocations/requests/{asked['id']}/approve/")
    assert response.status_code == 403
    assert response.json()["errors"][0]["field"] == "requester"


def test_the_project_page_shows_the_budget_and_offers_the_lead_a_request(browser, allocation, site):
    page = browser.get("/projects/materials/").content.decode()
    assert 'id="allocation-' in page and "materials 2026" in page
    assert 'id="request-allocation"' in page
    bob = User.objects.get(username="bob")
    Membership.objects.create(user=bob, project=allocation.project)
    member = Client()
    member.force_login(bob)
    page = member.get("/projects/materials/").content.decode()
    assert "materials 2026" in page and 'id="request-allocation"' not in page


def test_the_form_sends_a_request_and_the_admins_inbox_decides_it(browser, allocation):
    response = browser.post(
        "/projects/materials/allocations/request/",
        {"gpu_hours": "40", "core_hours": "", "ends": "", "justification": "deadline"},
    )
    assert response.status_code == 302
    asked = AllocationRequest.objects.get()
    admin = Client()
    admin.force_login(User.objects.get(username="admin"))
    inbox = admin.get("/allocations/requests/").content.decode()
    assert f'id="allocation-request-{asked.pk}"' in inbox and "deadline" in inbox
    assert "0.0 of 100 GPU-hours used; 0.0 of 1000 core-hours used" in inbox
    assert 'id="allocation-inbox"' not in browser.get("/allocations/requests/").content.decode()
    assert browser.post(f"/allocations/requests/{asked.pk}/approve/").status_code == 403
    admin.post(f"/allocations/requests/{asked.pk}/approve/", {"comment": "go"})
    allocation.refresh_from_db()
    assert allocation.gpu_hours == 140


def test_a_bad_form_is_not_sent_and_says_which_field(browser, allocation):
    response = browser.post(
        "/projects/materials/allocations/request/",
        {"gpu_hours": "many", "justification": "x"},
        follow=True,
    )
    assert "Not sent — gpu_hours" in response.content.decode()
    assert not AllocationRequest.objects.exists()


def test_an_approval_past_what_an_allocation_holds_is_refused_and_changes_nothing(
    api, admin_api, allocation
):
    Allocation.objects.filter(pk=allocation.pk).update(gpu_hours=2_147_483_000)
    asked = _ask(api, gpu_hours=1000).json()
    response = admin_api.post(f"/api/v1/allocations/requests/{asked['id']}/approve/")
    assert response.status_code == 409
    assert response.json()["errors"][0]["field"] == "gpu_hours"
    allocation.refresh_from_db()
    assert allocation.gpu_hours == 2_147_483_000
    assert AllocationRequest.objects.get().state == "pending"


def test_an_approval_is_undone_from_the_history_like_any_configuration(api, admin_api, allocation):
    from portal.services import config_version_restore

    asked = _ask(api, gpu_hours=50).json()
    admin_api.post(f"/api/v1/allocations/requests/{asked['id']}/approve/")
    created = ConfigVersion.objects.get(model="accounting.allocation", action="create")
    config_version_restore(
        user=User.objects.get(username="admin"), version=created, reason="granted by mistake"
    )
    allocation.refresh_from_db()
    assert allocation.gpu_hours == 100


def _grant(client, **body):
    body = {
        "project": "genomics",
        "name": "genomics 2027",
        "starts": "2027-01-01",
        "ends": "2027-12-31",
        "gpu_hours": 400,
        "reason": "the 2027 call",
        **body,
    }
    return client.post("/api/v1/allocations/", body, format="json")


def test_a_platform_admin_grants_an_allocation_with_a_reason_in_the_history(admin_api, site):
    response = _grant(admin_api)
    assert response.status_code == 201, response.json()
    made = response.json()
    assert (made["state"], made["resources"][0]["granted"]) == ("upcoming", 400)
    assert [line["resource"] for line in made["resources"]] == ["gpu_hours"]
    version = ConfigVersion.objects.get(model="accounting.allocation")
    assert (version.action, version.reason, version.author_name) == (
        "create",
        "the 2027 call",
        "admin",
    )
    assert AuditEvent.objects.filter(action="config.change", actor="admin").exists()
    assert _grant(admin_api).status_code == 409  # the same name again


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"project": "nope"}, "project"),
        ({"name": " "}, "name"),
        ({"starts": "soon"}, "starts"),
        ({"ends": "2026-12-31"}, "ends"),
        ({"gpu_hours": -1}, "gpu_hours"),
        ({"reason": ""}, "reason"),
    ],
)
def test_a_bad_grant_names_the_field(admin_api, site, body, field):
    response = _grant(admin_api, **body)
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == field
    assert not Allocation.objects.exists()


def test_only_a_platform_admin_grants(api, site):
    assert _grant(api, project="materials").status_code == 403
    assert not Allocation.objects.exists()
