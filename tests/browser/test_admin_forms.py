"""The queue admin's form and the Capacity page in real Chromium: a duration typed as 72h is
taken, a bad one shows one error and "not saved"; Capacity fits a 390 px wide phone."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from scheduling.models import Queue
from tests.browser.test_priority_flow import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def short_hpc(site) -> None:
    Queue.objects.filter(name="hpc").update(max_walltime_s=3600, default_walltime_s=None)


def test_the_queue_form_takes_72h_and_shows_one_error_for_a_bad_value(short_hpc, page):
    log_in(page, "quinn", "quinn-demo-pass")
    page.goto("/queues/hpc/edit/")
    expect(page.get_by_label("Longest run")).to_have_value("1h")
    expect(page.get_by_role("checkbox", name="hpc-simulation")).to_be_checked()

    page.get_by_label("Longest run").fill("3 days")
    page.get_by_label("Why").fill("longer runs this week")
    page.get_by_role("button", name="Save").click()
    expect(page.locator("#not-saved")).to_contain_text("Not saved")
    expect(page.locator(".field-error")).to_have_count(1)
    expect(page.locator("#error-max_walltime")).to_contain_text("must be a duration such as")

    page.get_by_label("Longest run").fill("72h")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".flash")).to_contain_text("Queue hpc changed")
    expect(page.locator("#queue-hpc")).to_contain_text("walltime at most 72h")


def test_a_weight_row_is_added_and_saved(site, page):
    log_in(page, "quinn", "quinn-demo-pass")
    page.goto("/queues/hpc/edit/")
    rows = page.locator("#weight-schedule tbody tr").count()
    page.get_by_role("button", name="Add a row").click()
    expect(page.locator("#weight-schedule tbody tr")).to_have_count(rows + 1)
    last = rows  # the new row's index: rows are numbered from 0
    page.locator(f'input[name="w{last}-from"]').fill("08:00")
    page.locator(f'input[name="w{last}-to"]').fill("20:00")
    page.locator(f'input[name="w{last}-hpc-simulation"]').fill("2")
    page.get_by_label("Why").fill("daytime HPC first")
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".flash")).to_contain_text("Queue hpc changed")
    expect(page.locator("#queue-hpc")).to_contain_text("08:00")


@pytest.mark.parametrize("username", ["admin", "quinn"])
def test_capacity_fits_a_390px_phone(site, chromium, live_server, username):
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 390, "height": 844}, is_mobile=True
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        log_in(page, username, f"{username}-demo-pass")
        page.goto("/capacity/")
        expect(page.locator("#nodes")).to_be_visible()
        # A mobile viewport zooms out to a wider page, so innerWidth grows with it; the
        # layout viewport (clientWidth) stays the phone's 390 px.
        scroll, inner, client = page.evaluate(
            "[document.documentElement.scrollWidth, window.innerWidth,"
            " document.documentElement.clientWidth]"
        )
        assert scroll <= min(inner, client), (
            f"/capacity/ as {username} is {scroll}px wide on a {client}px phone"
        )
    finally:
        context.close()
