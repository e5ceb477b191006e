"""Each role in Chromium: the login lands on the role's own page, and every link of its
navigation opens a page that answers (tests/unit/portal/test_role_crawl.py follows every
link further, without a browser)."""

from __future__ import annotations

import pytest

from tests.browser.test_priority_flow import log_in
from tests.conftest import descriptor, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LANDS = {
    "alice": "/",
    "quinn": "/queues/",
    "finn": "/usage/",
    "admin": "/",
}
PASSWORDS = {name: f"{name}-demo-pass" for name in LANDS}


@pytest.fixture
def a_task(site, api) -> int:
    """A task on the lists (ORM work before Playwright's loop runs)."""
    return submit(api, descriptor(name="nav-crawl")).json()["id"]


def test_each_role_lands_on_its_page_and_every_nav_link_answers(a_task, chromium, live_server):
    for username, landing in LANDS.items():
        context = chromium.new_context(base_url=live_server.url)
        context.set_default_timeout(15_000)
        page = context.new_page()
        log_in(page, username, PASSWORDS[username])
        assert page.url == live_server.url + landing, (username, page.url)
        links = page.locator("header.top nav a").evaluate_all("els => els.map(e => e.href)")
        assert len(links) >= 5, (username, links)
        for url in links:
            answer = page.goto(url)
            assert answer is not None and answer.status < 400, (
                username,
                url,
                answer and answer.status,
            )
        context.close()
