"""The task list in real Chromium: filters in the URL that the 2-s refresh keeps, ticks
that survive it, and a bulk cancel that lists what it affects before it cancels anything."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect
from rest_framework.test import APIClient

from scheduling.models import Attempt, Task
from tests.browser.test_priority_flow import log_in
from tests.browser.test_role_days import shot
from tests.conftest import descriptor, submit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def listed(site) -> dict[str, int]:
    """Three tasks, set where the test needs them (no worker: nothing moves them on)."""
    api = APIClient()
    api.force_authenticate(User.objects.get(username="alice"))
    ids = {}
    for name, kind, project in [
        ("md-a", "hpc-simulation", "materials"),
        ("md-b", "hpc-simulation", "materials"),
        ("agent-x", "agent", "climate"),
    ]:
        made = submit(api, descriptor(name=name, type=kind, project=project))
        assert made.status_code == 201, made.json()
        ids[name] = made.json()["id"]
    Task.objects.filter(pk=ids["md-a"]).update(
        state="running", started_at=timezone.now(), gpus=16, backend_id="777"
    )
    Attempt.objects.create(task_id=ids["md-a"], number=1, key="k-md-a", nodes=["gpu003", "gpu004"])
    Task.objects.filter(pk__in=[ids["md-b"], ids["agent-x"]]).update(state="waiting")
    return ids


def test_filters_and_a_confirmed_bulk_cancel(listed, page, tmp_path):
    log_in(page, "alice", "alice-demo-pass")
    page.goto("/")
    rows = page.locator("#task-rows tr[id^=task-]")
    expect(rows).to_have_count(3)
    expect(page.locator(f"#task-{listed['md-b']} time[data-relative]")).to_have_text("just now")

    # search by name, then a state: both in the URL, both kept by the 2-s refresh
    page.locator("#f-q").fill("md")
    page.locator("#f-apply").click()
    expect(page).to_have_url(re.compile(r"q=md"))
    expect(rows).to_have_count(2)
    page.locator("#f-state").select_option("waiting")
    expect(page).to_have_url(re.compile(r"q=md.*state=waiting|state=waiting.*q=md"))
    expect(rows).to_have_count(1)
    page.wait_for_timeout(2500)  # one refresh later, still filtered
    expect(rows).to_have_count(1)
    expect(page.locator(f"#task-{listed['md-b']}")).to_be_visible()

    # tick two rows; the ticks outlive the refresh; the button counts them
    page.goto("/?q=md")
    expect(rows).to_have_count(2)
    expect(page.locator("#bulk-cancel-button")).to_be_disabled()  # nothing ticked yet
    for name in ("md-a", "md-b"):
        page.locator(f"#task-{listed[name]} input.tick").check()
    button = page.locator("#bulk-cancel-button")
    expect(button).to_have_text("Cancel 2 tasks")
    page.wait_for_timeout(2500)
    expect(page.locator(f"#task-{listed['md-a']} input.tick")).to_be_checked()
    expect(button).to_have_text("Cancel 2 tasks")
    running = page.locator(f"#task-{listed['md-a']}")
    expect(running.locator(".owner")).to_have_text("alice")
    expect(running.locator(".nodes")).to_have_text("gpu003-gpu004")
    expect(running.locator(".elapsed")).to_contain_text("running")

    # the confirmation lists what it ends, and nothing is cancelled until "Yes"
    button.click()
    expect(page.get_by_role("heading", name="Cancel 2 tasks?")).to_be_visible()
    affected = page.locator("#bulk-affected")
    expect(affected).to_contain_text("16 GPUs on gpu003-gpu004")
    expect(affected).to_contain_text("its job ends now")
    expect(affected).to_contain_text("it leaves the queue")
    shot(page, "researcher-bulk-cancel", tmp_path)
    page.go_back()
    expect(page.locator(f"#task-{listed['md-b']} .state")).to_have_text("waiting")
    page.goto("/?q=md")
    for name in ("md-a", "md-b"):
        page.locator(f"#task-{listed[name]} input.tick").check()
    page.locator("#bulk-cancel-button").click()
    page.locator("#bulk-confirm-button").click()
    expect(page).to_have_url(re.compile(r"/\?q=md$"))
    expect(page.get_by_text("Cancelled 1: md-b.")).to_be_visible()
    expect(page.get_by_text("Being cancelled 1: md-a.")).to_be_visible()
    expect(page.locator(f"#task-{listed['md-b']} .state")).to_have_text("cancelled")
    expect(page.locator(f"#task-{listed['md-a']} .state")).to_have_text("cancelling")
