"""A queue admin in real Chromium starts a validation-day run, watches it run and reads the criteria
and the charts, with a real worker behind the page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.test_priority_flow import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_run_is_started_followed_to_its_end_and_its_charts_drawn(site, worker, page):
    log_in(page, "quinn", "quinn-demo-pass")
    page.get_by_role("link", name="Simulations").click()
    expect(page.get_by_role("heading", name="Simulations")).to_be_visible()
    page.get_by_label("Workload").select_option("validation-day")
    page.get_by_label("Seed").fill("2")
    page.locator("#simulation-submit").click()
    expect(page.locator(".flash")).to_contain_text("is queued")
    # The page follows the run (htmx) until the worker has stored its result.
    expect(page.locator("#simulation-state")).to_have_text("succeeded", timeout=60_000)
    criteria = page.locator("#simulation-criteria tbody tr")
    expect(criteria).to_have_count(6)
    expect(criteria.first).to_contain_text("agent mean wait")
    for chart in ("#chart-waits", "#chart-utilisation", "#chart-bsld"):
        expect(page.locator(f"{chart} .main-svg").first).to_be_visible()
    page.get_by_role("link", name="← All simulations").click()
    expect(page.locator("#simulation-runs")).to_contain_text("seed 2 · fifo, easy, switchyard")
