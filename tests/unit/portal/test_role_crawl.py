"""Every page a role can reach from its navigation answers: a crawl as each demo role, from
where its login lands, following the site's own links (pages, fragments, downloads left
out), finds no link that leads to a refusal, a missing page or an error."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import descriptor, submit
from tests.unit.portal.test_content_security_policy import crawl

pytestmark = pytest.mark.django_db

ROLES = ["alice", "bob", "quinn", "finn", "admin"]


@pytest.fixture
def work(site, api, outsider_api):
    """Something on every list: tasks of two projects, one in a workflow."""
    submit(api, descriptor(name="crawl-materials"))
    submit(outsider_api, descriptor(name="crawl-genomics", project="genomics"))
    flow = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "crawl-flow",
        "project": "materials",
        "tasks": [{**descriptor(name="step"), "project": "materials"}],
    }
    api.post("/api/v1/workflows/", flow, format="json")


@pytest.mark.parametrize("username", ROLES)
def test_every_page_reachable_from_a_roles_nav_answers(work, username):
    client = Client()
    client.force_login(User.objects.get(username=username))
    home = client.get("/home/")
    assert home.status_code == 302
    pages = crawl(client, [home["Location"]], limit=120)
    assert len(pages) > 10, sorted(pages)  # the crawl went somewhere
    broken = {url: a.status_code for url, a in pages.items() if a.status_code >= 400}
    assert broken == {}, f"{username} reaches links that answer an error: {broken}"


def test_a_task_folder_before_the_task_made_it_says_so_and_another_task_is_a_404(work):
    client = Client()
    client.force_login(User.objects.get(username="bob"))
    task = client.get("/api/v1/tasks/").json()["results"][0]["id"]
    page = client.get(f"/files/projects/genomics/tasks/{task}")
    assert page.status_code == 200
    assert "The task has not made this folder yet" in page.content.decode()
    assert client.get("/files/projects/genomics/tasks/99999").status_code == 404
    assert client.get("/files/projects/genomics/elsewhere").status_code == 404
