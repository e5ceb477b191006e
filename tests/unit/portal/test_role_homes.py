"""Each role lands where its day starts and finds its pages in the navigation: finance on
every project's usage with reconciliation and the rate card, no Submit; a queue admin on
the queues with the requests to decide; a researcher on their tasks."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from accounting.models import Rate, Reconciliation
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db


def _logged_in(site, username: str, password: str) -> tuple[Client, str]:
    client = Client()
    answer = client.post("/login/", {"username": username, "password": password}, follow=True)
    assert answer.status_code == 200
    return client, answer.redirect_chain[-1][0]


def _nav(html: str) -> str:
    return html[html.index("<nav>") : html.index("</nav>")]


def test_finance_lands_on_every_projects_usage_with_its_pages_in_the_nav(site):
    finn, landed = _logged_in(site, "finn", "finn-demo-pass")
    assert landed == "/usage/"
    html = finn.get(landed).content.decode()
    nav = _nav(html)
    assert 'href="/usage/reconciliation/"' in nav and 'href="/usage/rates/"' in nav
    assert 'href="/tasks/new/"' not in nav and 'href="/files/"' not in nav
    projects = finn.get("/projects/").content.decode()
    assert "You are not a member" not in projects
    for slug in ("materials", "climate", "genomics"):
        assert f'href="/projects/{slug}/"' in projects
    assert finn.get("/projects/genomics/").status_code == 200


def test_a_queue_admin_lands_on_the_queues_and_a_researcher_on_the_tasks(site, api):
    task = submit(api, descriptor(name="sim", type="hpc-simulation", queue="hpc")).json()
    asked = {"task": task["id"], "level": "high", "reason": "paper deadline", "until": "2h"}
    assert api.post("/api/v1/priority-requests/", asked, format="json").status_code == 201
    quinn, landed = _logged_in(site, "quinn", "quinn-demo-pass")
    assert landed == "/queues/"
    queues = quinn.get(landed).content.decode()
    assert "1 priority request to decide" in queues
    assert "walltime at most 72h" in queues and "259200 s" not in queues
    alice, landed = _logged_in(site, "alice", "alice-demo-pass")
    assert landed == "/"
    assert 'href="/tasks/new/"' in _nav(alice.get("/").content.decode())
    assert 'href="/usage/rates/"' not in _nav(alice.get("/").content.decode())


def test_the_rate_card_is_read_only_and_shows_what_comes(site):
    now = timezone.now()
    Rate.objects.create(
        metric="gpu", price=Decimal("15"), valid_from=now + timedelta(days=3), note="new GPUs"
    )
    finn, _ = _logged_in(site, "finn", "finn-demo-pass")
    html = finn.get("/usage/rates/").content.decode()
    assert "per GPU-hour" in html and "per core-hour" in html
    assert "upcoming" in html and "new GPUs" in html
    assert "Change rates" not in html  # finance reads; a platform admin changes them
    assert finn.post("/usage/rates/").status_code == 405


def test_reconciliation_says_when_it_ran_and_when_it_runs_next(site):
    finn, _ = _logged_in(site, "finn", "finn-demo-pass")
    assert "No reconciliation has run yet" in finn.get("/usage/reconciliation/").content.decode()
    ran = timezone.now().replace(microsecond=0)
    made = Reconciliation.objects.create(
        backend="slurm",
        period_start=ran - timedelta(days=2),
        period_end=ran,
        outcome="clean",
        tolerance=Decimal("0.001"),
    )
    Reconciliation.objects.filter(pk=made.pk).update(ran_at=ran)
    html = finn.get("/usage/reconciliation/").content.decode()
    assert f"Last run: <b>{ran:%Y-%m-%d %H:%M} UTC</b>" in html
    assert f"Next run: about <b>{ran + timedelta(hours=1):%Y-%m-%d %H:%M} UTC</b>, every 1h" in html
