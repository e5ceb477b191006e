"""A workflow's page follows its tasks in place, in real Chromium: only what changed comes
back (GET /workflows/<id>/changes/), the row, the box and its arrows change without a reload,
and once nothing can move the page is loaded once, whole."""

from __future__ import annotations

import json
import re
import threading

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _in_thread(fn) -> None:
    """ORM calls from a thread of their own: Playwright's loop runs in this one."""
    errors: list[BaseException] = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    if errors:
        raise errors[0]


@pytest.fixture
def diamond(site):
    from django.contrib.auth.models import User

    from scheduling import services
    from tests.unit.scheduling.workflows.helpers import DIAMOND, workflow

    alice = User.objects.get(username="alice")
    wf = services.workflow_submit(
        user=alice, text=json.dumps(workflow(*DIAMOND, name="live-diamond")), fmt="json"
    )
    return wf.pk, dict(wf.tasks.values_list("name", "pk"))


def _set(pks, state: str, *, workflow: tuple[int, str] | None = None) -> None:
    from django.utils import timezone

    from scheduling.models import Task, Workflow

    def update():
        Task.objects.filter(pk__in=pks).update(state=state, reason="", updated_at=timezone.now())
        if workflow:
            Workflow.objects.filter(pk=workflow[0]).update(state=workflow[1], reason="all done")

    _in_thread(update)


def test_the_workflow_page_changes_in_place_then_loads_once_when_it_ends(diamond, page):
    wf, ids = diamond
    page.goto("/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-demo-pass")
    page.get_by_role("button", name="Log in").click()
    page.goto(f"/workflows/{wf}/")
    page.evaluate("window.notReloaded = true")
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "/changes/" in r.url else None)

    _set([ids["a"]], "succeeded")
    row = page.locator(f"#task-{ids['a']}")
    expect(row).to_have_attribute("data-state", "succeeded", timeout=15_000)
    expect(row.locator(".state")).to_have_text("succeeded")
    expect(page.locator(f"#dag-task-{ids['a']}")).to_have_attribute("data-state", "succeeded")
    expect(page.locator(f'path[data-from="{ids["a"]}"]').first).to_have_attribute(
        "class", "dag-edge done"
    )
    assert page.evaluate("window.notReloaded") is True  # changed in place
    assert asked and all(re.search(r"/changes/\?since=[\d.]+$", url) for url in asked)

    _set(list(ids.values()), "succeeded", workflow=(wf, "succeeded"))
    expect(page.locator("#workflow-state")).to_have_text("succeeded", timeout=15_000)
    page.wait_for_function("window.notReloaded === undefined", timeout=15_000)
    expect(page.locator("#cancel-workflow")).to_have_count(0)
    assert page.locator("#workflow-status").get_attribute("data-live") is None
