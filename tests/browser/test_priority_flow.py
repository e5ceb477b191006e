"""A raise, in real Chromium: a researcher asks, a queue admin approves in the inbox, the
task's level changes on its page, and goes back when the request expires."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone
from playwright.sync_api import expect

from scheduling.models import PriorityRequest, Task
from scheduling.selectors import site_view_invalidate
from scheduling.services.quotas import quota_set
from tests.conftest import descriptor, submit
from tests.integration.conftest import wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def log_in(page, username: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    # Each role lands on its own page (a researcher's tasks, a queue admin's queues …).
    expect(page.get_by_role("button", name=f"Log out {username}")).to_be_visible()


@pytest.fixture
def held_task(site, api, start_worker):
    """One running HPC task fills the project's quota, so the next one waits unstarted: its
    level is what decides when it starts. (ORM work before Playwright's loop runs.)"""
    quota_set(project="materials", queue="hpc", resource="tasks", limit=1)
    site_view_invalidate()
    start_worker(extra_env={"SWITCHYARD_POLICY_MS": "500"})
    hpc = {"type": "hpc-simulation", "walltime": "10m", "resources": {"cpus": 1}}
    busy = submit(api, descriptor(name="busy", command=["sleep", "300"], **hpc)).json()["id"]
    # The worker was just started: on a loaded machine its first dispatch took over 30 s.
    wait_for(lambda: Task.objects.get(pk=busy).admitted, timeout=90, what="the busy task admitted")
    waits = submit(api, descriptor(name="waits", command=["true"], **hpc)).json()["id"]
    yield waits
    for pk in (busy, waits):
        api.post(f"/api/v1/tasks/{pk}/cancel/")
    assert Task.objects.get(pk=waits).events.filter(message__contains="expired").exists()


def end_now(task_pk: int) -> None:
    """The approved request of the task, asked to last 30 s, ends now: its expiry is what the
    test follows, not the 30 s (the worker's policy pass expires it as at its natural end)."""
    request = PriorityRequest.objects.get(task_id=task_pk, state=PriorityRequest.State.APPROVED)
    lasts = (request.until - request.created_at).total_seconds()
    assert 29 <= lasts <= 31, f"asked for 30s, holds {lasts:.1f} s"
    PriorityRequest.objects.filter(pk=request.pk).update(until=timezone.now())


def in_thread(work, *args) -> None:
    """Runs ORM work in a thread of its own: Django refuses it in this one while Playwright's
    event loop runs here."""

    def run() -> None:
        try:
            work(*args)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(run).result()


def test_a_raise_is_asked_approved_applied_and_reverted(held_task, chromium, live_server):
    waits = held_task
    researcher = chromium.new_context(base_url=live_server.url)
    researcher.set_default_timeout(15_000)
    page = researcher.new_page()
    log_in(page, "alice", "alice-demo-pass")
    page.goto(f"/tasks/{waits}/")
    expect(page.locator("#task-reason")).to_contain_text("uses 1/1 running tasks in queue hpc")
    expect(page.locator("#task-level-name")).to_have_text("low")
    page.locator("#ask-priority summary").click()
    page.get_by_label("Why").fill("revision due tomorrow")
    page.get_by_label("Until").fill("30s")
    page.locator("#ask-priority-submit").click()
    expect(page.locator(".flash")).to_contain_text("a queue admin of hpc decides")
    expect(page.locator("#task-wait")).to_contain_text("awaits a decision")

    admin = chromium.new_context(base_url=live_server.url)
    admin.set_default_timeout(15_000)
    inbox = admin.new_page()
    log_in(inbox, "quinn", "quinn-demo-pass")
    inbox.get_by_role("link", name="Requests").click()
    row = inbox.locator("#inbox tbody tr").filter(has_text="revision due tomorrow")
    expect(row).to_contain_text("alice")
    row.get_by_label(re.compile("comment on request")).fill("fine, until the deadline")
    row.get_by_role("button", name="Approve").click()
    expect(inbox.locator(".flash")).to_contain_text("approved")
    expect(inbox.locator("#inbox-empty")).to_be_visible()

    # The researcher's page updates itself: the level is high now …
    expect(page.locator("#task-level-name")).to_have_text("high", timeout=15_000)
    expect(page.locator("#task-level")).to_contain_text("approved by quinn")
    # … and low again once the request has expired (the worker's policy pass).
    in_thread(end_now, waits)
    expect(page.locator("#task-level-name")).to_have_text("low", timeout=15_000)
    expect(page.locator("#task-requests")).to_contain_text("expired")

    researcher.close()
    admin.close()
