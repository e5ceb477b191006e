"""A researcher's first task, in real Chromium: log in, submit, watch it succeed, read its log."""

from __future__ import annotations

import os
import re
import shutil

import pytest
from playwright.sync_api import expect

from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREENSHOTS = ROOT / "docs" / "screenshots"


def test_a_researcher_submits_from_the_form_and_watches_it_succeed(site, worker, page, tmp_path):
    page.goto("/")  # not logged in: the login page, under the product's name
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))
    expect(page.locator("h1")).to_contain_text("Switchyard")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-demo-pass")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()

    page.get_by_role("link", name="Submit", exact=True).click()
    page.get_by_label("Name").fill("browser-run")
    page.get_by_label("Project").select_option("materials")
    page.get_by_label("Command").fill("sh -c 'echo browser-ok'")
    page.get_by_label("Walltime").fill("5m")
    page.locator("#submit").click()

    expect(page).to_have_url(re.compile(r"/tasks/\d+/$"))
    expect(page.locator("h1")).to_contain_text("browser-run")
    expect(page.locator("#routing-reason")).not_to_be_empty()
    task_id = int(re.search(r"/tasks/(\d+)/$", page.url).group(1))

    page.get_by_role("link", name="Tasks", exact=True).click()
    row = page.locator(f"#task-{task_id}")
    expect(row).to_contain_text("browser-run")
    # A marker on window survives htmx swaps but not a reload: the row must change in place.
    page.evaluate("window.notReloaded = true")
    expect(row).to_have_attribute("data-state", "succeeded", timeout=30_000)
    expect(row.locator(".state")).to_have_text("succeeded")
    assert page.evaluate("window.notReloaded") is True

    page.screenshot(path=str(tmp_path / "task-list.png"), full_page=True)
    if os.environ.get("SWITCHYARD_UPDATE_SCREENSHOTS") == "1":  # refresh the docs' picture
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / "task-list.png", SCREENSHOTS / "task-list.png")

    row.get_by_role("link", name="browser-run").click()
    expect(page.locator("#task-state")).to_have_text("succeeded")
    expect(page.locator("#task-log")).to_contain_text("browser-ok")
    expect(page.locator("#cancel")).to_have_count(0)
    expect(page.locator("ol.timeline li").last).to_contain_text("succeeded")
    page.screenshot(path=str(tmp_path / "task-page.png"), full_page=True)
