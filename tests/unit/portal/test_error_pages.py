"""What a person sees when a page is not theirs, not there or not allowed: the portal's own
page with its navigation and a way on, not the server's bare text; and the site's icon."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from portal.models import Membership, Project
from tests.conftest import descriptor, submit


def _as(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def test_a_task_of_another_project_is_a_styled_404_with_the_nav(api, outsider):
    task_id = submit(api, descriptor()).json()["id"]
    page = _as(outsider.username).get(f"/tasks/{task_id}/")
    assert page.status_code == 404
    html = page.content.decode()
    assert "<h1>Not found</h1>" in html and f"<code>/tasks/{task_id}/</code>" in html
    assert 'href="/workflows/"' in html and "Log out bob" in html  # the nav, signed in
    assert "switchyard.css" in html


def test_an_unknown_address_signed_out_offers_the_login(site):
    page = Client().get("/no/such/page/")
    assert page.status_code == 404
    html = page.content.decode()
    assert "<h1>Not found</h1>" in html and "/login/?next=/no/such/page/" in html


def test_an_api_path_that_names_nothing_answers_in_the_apis_error_shape(api):
    answer = api.get("/api/v1/no-such-thing/")
    assert answer.status_code == 404 and answer["Content-Type"] == "application/json"
    assert answer.json() == {
        "errors": [
            {"field": None, "message": "no such API path: /api/v1/no-such-thing/", "got": None}
        ]
    }


def test_a_refusal_says_why_and_that_nothing_changed(site):
    # A plain member sees the project's quotas but does not set them.
    carol = User.objects.create_user("carol")
    Membership.objects.create(project=Project.objects.get(slug="materials"), user=carol)
    quota = {"queue": "hpc", "resource": "cpus", "limit": "999"}
    page = _as("carol").post("/projects/materials/quotas/", quota)
    assert page.status_code == 403
    html = page.content.decode()
    assert "<h1>Not allowed</h1>" in html and "Nothing was changed" in html
    assert "Log out carol" in html


def test_the_favicon_is_the_portals_icon(site):
    answer = Client().get("/favicon.ico")
    assert answer.status_code == 301 and answer["Location"].endswith(".svg")
    assert "favicon" in answer["Location"]
