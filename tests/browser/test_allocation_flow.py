"""Allocations in real Chromium: a project's lead asks for more, a platform admin approves it
in the allocation inbox, and the project's page shows the new budget; a lead renews an
expired allocation the same way, and the page stops saying that new work waits."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from accounting.allocation_selectors import today
from accounting.models import Allocation
from portal.models import Project
from tests.browser.test_priority_flow import log_in
from tests.browser.test_role_days import nav, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _allocation(*, days_left: int) -> Allocation:
    day = today(timezone.now())
    return Allocation.objects.create(
        project=Project.objects.get(slug="materials"),
        name="materials 2026",
        starts=day - timedelta(days=200),
        ends=day + timedelta(days=days_left),
        gpu_hours=100,
        core_hours=2000,
    )


@pytest.fixture
def allocation(site) -> Allocation:
    return _allocation(days_left=30)


@pytest.fixture
def expired(site) -> Allocation:
    return _allocation(days_left=-1)


def _ask(page, *, gpu_hours: str = "", core_hours: str = "", ends: str = "", why: str) -> None:
    form = page.locator("#request-allocation")
    form.get_by_label("GPU-hours more").fill(gpu_hours)
    form.get_by_label("Core-hours more").fill(core_hours)
    if ends:
        form.get_by_label("Until").fill(ends)
    form.get_by_label("Justification").fill(why)
    form.get_by_role("button", name="Request").click()
    expect(page.locator(".flash.success")).to_contain_text("a platform admin decides")


def _approve(chromium, live_server, comment: str, tmp_path, name: str | None = None) -> None:
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    log_in(page, "admin", "admin-demo-pass")
    nav(page, "Allocations").click()
    row = page.locator("#allocation-inbox tbody tr").filter(has_text="materials")
    expect(row.locator(".allocation-standing")).to_contain_text("materials 2026")
    row.get_by_label(re.compile("comment on allocation request")).fill(comment)
    if name:
        shot(page, name, tmp_path)
    row.get_by_role("button", name="Approve").click()
    expect(page.locator(".flash")).to_contain_text("approved")
    expect(page.locator("#allocation-recent")).to_contain_text(comment)
    context.close()


def test_a_lead_asks_for_more_an_admin_approves_and_the_page_shows_the_new_budget(
    allocation, page, chromium, live_server, tmp_path
):
    log_in(page, "alice", "alice-demo-pass")
    page.goto("/projects/materials/")
    gpu = page.locator(f"#allocation-{allocation.pk}-gpu_hours")
    expect(gpu.locator(".granted")).to_have_text("100")
    _ask(page, gpu_hours="50", why="the ablation runs for the revision")
    expect(page.locator("#allocation-pending")).to_contain_text("pending")
    expect(page.locator("#request-allocation")).to_have_count(0)  # one pending at a time

    _approve(chromium, live_server, "granted for the revision", tmp_path, "admin-allocations")

    page.reload()
    expect(gpu.locator(".granted")).to_have_text("150")
    expect(gpu.locator(".remaining")).to_have_text("150.0")
    expect(page.locator(f"#allocation-{allocation.pk}-core_hours .granted")).to_have_text("2000")
    expect(page.locator("#allocations")).to_contain_text("granted for the revision")
    shot(page, "lead-allocation", tmp_path)


def test_a_lead_renews_an_expired_allocation_and_new_work_no_longer_waits(
    expired, page, chromium, live_server, tmp_path
):
    log_in(page, "alice", "alice-demo-pass")
    page.goto("/projects/materials/")
    expect(page.locator("#allocation-waits")).to_contain_text(
        f"allocation 'materials 2026' expired on {expired.ends:%Y-%m-%d}"
    )
    until = today(timezone.now()) + timedelta(days=365)
    _ask(page, core_hours="5000", ends=until.isoformat(), why="next year's simulations")

    _approve(chromium, live_server, "renewed", tmp_path)

    page.reload()
    expect(page.locator("#allocation-waits")).to_have_count(0)
    fresh = page.locator("#allocations .allocation").first
    expect(fresh).to_contain_text(f"– {until:%Y-%m-%d}")
    expect(fresh).to_contain_text("current")
    expect(fresh.locator(".granted")).to_have_text("5000")


@pytest.fixture
def pending(allocation) -> Allocation:
    from django.contrib.auth.models import User

    from accounting.allocation_services import allocation_request_create

    allocation_request_create(
        user=User.objects.get(username="alice"),
        project="materials",
        gpu_hours=25,
        justification="a long justification that a phone must wrap, not scroll sideways",
    )
    return allocation


def test_the_allocation_pages_fit_a_390px_phone(pending, chromium, live_server):
    for username, path in (("alice", "/projects/materials/"), ("admin", "/allocations/requests/")):
        context = chromium.new_context(
            base_url=live_server.url, viewport={"width": 390, "height": 844}, is_mobile=True
        )
        context.set_default_timeout(15_000)
        page = context.new_page()
        log_in(page, username, f"{username}-demo-pass")
        page.goto(path)
        expect(page.locator("#allocations, #allocation-inbox")).to_have_count(1)
        overflow = page.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 1, f"{path} as {username} is {overflow}px wider than the phone"
        context.close()
