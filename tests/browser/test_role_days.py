"""One day of each role, in real Chromium: a researcher, a queue admin, a platform admin and
finance do their work through the pages; every page also fits a 390 px wide phone.

`make screenshots` runs these with SWITCHYARD_UPDATE_SCREENSHOTS=1: each `shot()` then
refreshes its picture in docs/screenshots/ (otherwise they go to the test's tmp folder).
"""

from __future__ import annotations

import os
import re
import shutil

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from scheduling.models import Node, PriorityRequest, RoutingRule, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.quotas import quota_set
from tests.browser.test_priority_flow import log_in
from tests.conftest import ROOT, descriptor, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "docs" / "screenshots"


def shot(page, name: str, tmp_path) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("SWITCHYARD_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, SCREENSHOTS / f"{name}.png")


def nav(page, name: str):
    """A link of the page header's menu."""
    return page.locator("header.top nav").get_by_role("link", name=name, exact=True)


def _context(chromium, live_server, **options):
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}, **options
    )
    context.set_default_timeout(15_000)
    return context


@pytest.fixture
def budget_hold(site):
    """HPC work of materials waits: its monthly core-hour budget is spent (0)."""
    quota_set(project="materials", queue="hpc", resource="core_hours", limit=0, period="month")
    site_view_invalidate()


def test_a_researchers_day(budget_hold, worker, chromium, live_server, tmp_path):
    context = _context(chromium, live_server)
    page = context.new_page()
    log_in(page, "alice", "alice-demo-pass")

    # submit from a template, and watch it run live
    nav(page, "Submit").click()
    page.locator("#template-agent").click()
    expect(page.get_by_label("Name", exact=True)).to_have_value("agent-step")
    page.get_by_label("Command", exact=True).fill("sh -c 'echo from-the-template'")
    shot(page, "researcher-template", tmp_path)
    page.locator("#submit").click()
    expect(page.locator("#task-state")).to_have_text("succeeded", timeout=60_000)
    expect(page.locator("#task-log")).to_contain_text("from-the-template")

    # an HPC run waits: the page says why; ask for a raise
    nav(page, "Submit").click()
    page.locator("#template-hpc-simulation").click()
    page.get_by_label("Project", exact=True).select_option("materials")
    page.get_by_label("CPUs", exact=True).fill("2")
    page.get_by_label("Memory", exact=True).fill("1Gi")
    page.locator("#submit").click()
    expect(page.locator("#task-reason")).to_contain_text("core-hour", timeout=20_000)
    expect(page.locator("#task-reason")).to_contain_text("budget")
    page.locator("#ask-priority summary").click()
    page.get_by_label("Why").fill("conference deadline")
    page.locator("#ask-priority-submit").click()
    expect(page.locator(".flash")).to_contain_text("a queue admin of hpc decides")
    shot(page, "researcher-task-waits", tmp_path)

    # the dashboard: what runs, what waits and why
    nav(page, "Dashboard").click()
    expect(page.locator("#tile-waiting b")).to_have_text("1")
    expect(page.locator("#waiting-tasks")).to_contain_text("mpi-simulation")
    expect(page.locator("#waiting-tasks")).to_contain_text("budget")
    expect(page.locator("#chart-waits .main-svg").first).to_be_attached()
    shot(page, "researcher-dashboard", tmp_path)
    context.close()


@pytest.fixture
def pending_request(site, api, budget_hold):
    made = submit(api, descriptor(name="needs-raise", type="hpc-simulation", queue="hpc"))
    task = Task.objects.get(pk=made.json()["id"])
    api.post(
        "/api/v1/priority-requests/",
        {"task": task.pk, "level": "high", "reason": "paper revision", "until": "4h"},
        format="json",
    )
    assert PriorityRequest.objects.filter(task=task, state="pending").exists()
    return Node.objects.filter(pool__name="cpu-hpc").order_by("name").first().name


def test_a_queue_admins_day(pending_request, chromium, live_server, tmp_path):
    node = pending_request
    context = _context(chromium, live_server)
    page = context.new_page()
    log_in(page, "quinn", "quinn-demo-pass")
    expect(nav(page, "Admin")).to_have_count(0)  # not the platform's

    nav(page, "Requests").click()
    row = page.locator("#inbox tbody tr").filter(has_text="paper revision")
    row.get_by_label(re.compile("comment on request")).fill("granted for the revision")
    shot(page, "queue-admin-requests", tmp_path)
    row.get_by_role("button", name="Approve").click()
    expect(page.locator(".flash")).to_contain_text("approved")

    nav(page, "Capacity").click()
    page.get_by_label(f"why drain {node}").fill("fan replacement")
    page.locator(f"#drain-{node}").click()
    expect(page.locator("#confirm-what")).to_contain_text("nothing new starts")
    page.locator("#confirm-drained").click()
    expect(page.locator(".flash")).to_contain_text(f"Node {node}: drained")
    expect(page.locator(f"#node-{node}")).to_contain_text("fan replacement")
    shot(page, "queue-admin-capacity", tmp_path)

    nav(page, "Queues").click()
    page.locator("#edit-hpc").click()
    page.get_by_label("Running at most").fill("40")
    page.get_by_label("Why").fill("fewer jobs while a node is out")
    shot(page, "queue-admin-edit", tmp_path)
    page.get_by_role("button", name="Save").click()
    expect(page.locator(".flash")).to_contain_text("Queue hpc changed")
    expect(page.locator("#queue-hpc")).to_contain_text("at most 40 running")

    nav(page, "Site").click()
    expect(page.locator("#load-now")).to_contain_text("hpc")
    expect(page.locator("#chart-reasons .main-svg").first).to_be_attached()
    shot(page, "site-dashboard", tmp_path)

    nav(page, "Audit").click()
    expect(page.locator("#audit")).to_contain_text("Node drained")
    expect(page.locator("#audit")).to_contain_text("Priority raise approved")
    context.close()


@pytest.fixture
def rule_id(site):
    return RoutingRule.objects.filter(match_type="ai-training").first().pk


def test_a_platform_admins_day(rule_id, chromium, live_server, tmp_path):
    context = _context(chromium, live_server)
    page = context.new_page()
    log_in(page, "admin", "admin-demo-pass")

    # change a routing rule in the admin console
    page.goto(f"/admin/scheduling/routingrule/{rule_id}/change/")
    page.get_by_label("Enabled").uncheck()
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".errorlist")).to_contain_text("Say why")  # nothing saved without
    page.get_by_label("Enabled").uncheck()
    page.get_by_label("Reason for this change").fill("training pauses for the upgrade")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")

    # see the diff in the history (the kind by its name, the reason kept), and roll back
    page.goto("/config/")
    page.get_by_label("Kind").select_option(label="Routing rule")
    expect(page).to_have_url(re.compile(r"model=scheduling.routingrule"))
    latest = page.locator("#versions tbody tr").first
    expect(latest).to_contain_text("training pauses for the upgrade")
    latest.get_by_role("link", name=re.compile(r"^v\d+$")).click()
    expect(page.locator("#changes table.diff")).to_contain_text("enabled")
    expect(page.locator("#changes table.diff td.new")).to_contain_text("False")
    shot(page, "admin-diff", tmp_path)
    page.locator("#previous-version").click()
    page.get_by_label("Why").fill("training went to the wrong queue")
    page.locator("#rollback-button").click()
    expect(page.locator(".flash")).to_contain_text("Rolled back")
    expect(page.locator("h1")).to_contain_text("Rolled back")
    expect(page.locator("#changes table.diff td.new")).to_contain_text("True")
    shot(page, "admin-rollback", tmp_path)

    # undo the rollback from the list: its page shows what undoing does, and asks why
    nav(page, "History").click()
    page.locator("#versions tbody tr").first.get_by_role("link", name="undo this change").click()
    expect(page.locator("#undo table.diff td.new").first).to_contain_text("False")
    page.get_by_label("Reason for undoing it").fill("the pause was right after all")
    shot(page, "admin-undo", tmp_path)
    page.locator("#undo-button").click()
    expect(page.locator(".flash")).to_contain_text("Undid")
    expect(page.locator("p").filter(has_text="the pause was right after all")).to_have_count(1)

    nav(page, "Audit").click()
    page.get_by_label("Action").select_option("config.rollback")
    expect(page.locator("#audit")).to_contain_text("training went to the wrong queue")
    context.close()


def test_a_finance_day(site, chromium, live_server, tmp_path):
    context = _context(chromium, live_server, accept_downloads=True)
    page = context.new_page()
    log_in(page, "finn", "finn-demo-pass")
    # Finance lands on every project's usage, with its own pages in the nav and no Submit.
    expect(page.get_by_role("heading", name="Usage")).to_be_visible()
    expect(nav(page, "Submit")).to_have_count(0)
    expect(nav(page, "Rates")).to_have_count(1)
    shot(page, "finance-usage", tmp_path)
    with page.expect_download() as download:
        page.locator("#download-csv").click()
    assert download.value.suggested_filename.endswith(".csv")
    # read only: no configuration, no capacity, no reconciliation runs
    expect(nav(page, "History")).to_have_count(0)
    nav(page, "Reconciliation").click()
    expect(page.get_by_role("button", name="Reconcile now")).to_have_count(0)
    expect(page.locator("#reconcile-schedule")).to_contain_text("No reconciliation has run yet")
    nav(page, "Rates").click()
    expect(page.locator("#rates")).to_contain_text("per GPU-hour")
    context.close()


PHONE_PAGES = {
    "alice": [
        "/dashboard/",
        "/",
        "/tasks/new/",
        "/workflows/",
        "/queues/",
        "/projects/materials/",
        "/usage/",
        "/priority-requests/",
        "/audit/",
    ],
    "quinn": ["/dashboard/site/", "/capacity/", "/queues/hpc/edit/", "/config/"],
}


def test_pages_fit_a_390px_phone(site, chromium, live_server, tmp_path):
    for username, paths in PHONE_PAGES.items():
        context = chromium.new_context(
            base_url=live_server.url, viewport={"width": 390, "height": 844}, is_mobile=True
        )
        context.set_default_timeout(15_000)
        page = context.new_page()
        page.goto("/login/")
        page.get_by_label("Username").fill(username)
        page.get_by_label("Password").fill(f"{username}-demo-pass")
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(re.compile(r"/$"))
        for path in paths:
            page.goto(path)
            page.wait_for_load_state("load")
            overflow = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 1, f"{path} as {username} is {overflow}px wider than the phone"
        if username == "alice":
            page.goto("/dashboard/")
            shot(page, "phone-dashboard", tmp_path)
        context.close()


def test_the_demo_users_are_what_the_docs_say(site):
    assert not User.objects.get(username="quinn").is_staff
    assert User.objects.get(username="admin").is_superuser
