"""The strict Content-Security-Policy in real Chromium: the main pages and the API docs page
(Swagger UI) work under it with no violation reported (the `page` fixture fails any browser
test on a violation; here the pages are visited on purpose)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.test_priority_flow import log_in
from tests.conftest import descriptor, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = [
    ("/", "Tasks"),
    ("/dashboard/", "Dashboard"),
    ("/tasks/new/?template=ai-training", "Submit a task"),
    ("/workflows/", "Workflows"),
    ("/queues/", "Queues"),
    ("/usage/", "Usage"),
    ("/dashboard/site/", None),
    ("/capacity/", "Capacity"),
    ("/config/", None),
    ("/audit/", "Audit log"),
    ("/simulations/", None),
]


@pytest.fixture
def task_id(site, api) -> int:
    return submit(api, descriptor(name="csp-browser")).json()["id"]


def test_the_main_pages_and_the_api_docs_run_with_no_policy_violation(task_id, page):
    log_in(page, "admin", "admin-demo-pass")
    for url, heading in [*PAGES, (f"/tasks/{task_id}/", None)]:
        answer = page.goto(url)
        # The policy is on (no violation without one would prove nothing).
        assert "script-src 'self'" in answer.headers.get("content-security-policy", ""), url
        page.wait_for_load_state("load")
        if heading:
            expect(page.get_by_role("heading", name=heading, exact=True).first).to_be_visible()
    # The state filter submits itself without an inline handler.
    page.goto("/")
    page.wait_for_load_state("load")
    page.locator("#f-state").select_option("succeeded")
    expect(page).to_have_url(re.compile(r"state=succeeded"))

    answer = page.goto("/api/v1/docs/")
    assert "default-src 'self'" in answer.headers.get("content-security-policy", "")
    # Swagger UI started (its script from static, its start-up from the split view) and read
    # the schema: the operations are listed.
    expect(page.locator(".swagger-ui .opblock-tag").first).to_be_visible(timeout=20_000)
    expect(page.get_by_text("/api/v1/tasks/", exact=True).first).to_be_attached()
    page.wait_for_timeout(500)  # let late reports arrive
    assert page.csp_violations == []
