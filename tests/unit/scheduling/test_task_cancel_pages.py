"""Cancelling from the pages: the task page's button leads to a confirmation that says what
cancelling ends (no script needed); the list's ticked rows to one that lists them, and only
tasks the user may change are cancelled."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from scheduling.models import Attempt, Task
from tests.conftest import descriptor, submit


def _task(api, name: str, **fields) -> Task:
    response = submit(api, descriptor(name=name, type="hpc-simulation", **fields))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


def _running(task: Task, gpus: int, nodes: list[str]) -> Task:
    Task.objects.filter(pk=task.pk).update(
        state="running", started_at=timezone.now(), gpus=gpus, backend_id="4242"
    )
    Attempt.objects.create(task=task, number=1, key=f"k-{task.pk}", nodes=nodes)
    task.refresh_from_db()
    return task


def test_the_task_page_asks_before_cancelling_a_running_task(browser, api):
    task = _running(_task(api, "big-train"), 16, ["gpu003", "gpu004"])
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert f'href="/tasks/{task.pk}/cancel/" id="cancel"' in page
    assert "onclick" not in page and "onsubmit" not in page
    confirm = browser.get(f"/tasks/{task.pk}/cancel/")
    assert confirm.status_code == 200
    text = confirm.content.decode()
    assert "Cancel this running task holding 16 GPUs on gpu003-gpu004? Its job ends now." in text
    task.refresh_from_db()
    assert task.cancel_requested_at is None  # asking cancels nothing
    browser.post(f"/tasks/{task.pk}/cancel/")
    task.refresh_from_db()
    assert task.cancel_requested_at is not None


def test_the_confirmation_of_a_waiting_task_says_it_has_not_started(browser, api):
    task = _task(api, "sim")
    Task.objects.filter(pk=task.pk).update(state="waiting")
    text = browser.get(f"/tasks/{task.pk}/cancel/").content.decode()
    assert "Cancel this waiting task? It has not started; it leaves the queue." in text


def test_a_queue_admin_gets_no_cancel_confirmation(api, site):
    task = _task(api, "sim")
    quinn = Client()
    quinn.force_login(User.objects.get(username="quinn"))
    assert quinn.get(f"/tasks/{task.pk}/cancel/").status_code == 403
    assert 'id="cancel"' not in quinn.get(f"/tasks/{task.pk}/").content.decode()


def test_bulk_cancel_lists_what_it_affects_then_cancels_only_on_confirmation(browser, api):
    big = _running(_task(api, "big-train"), 16, ["gpu003", "gpu004"])
    waiting = _task(api, "sweep-1")
    Task.objects.filter(pk=waiting.pk).update(state="waiting")
    ticked = {"task": [str(big.pk), str(waiting.pk)], "back": "state=running&q=big"}
    page = browser.post("/tasks/cancel/", ticked)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Cancel 2 tasks?" in text
    assert "big-train" in text and "16 GPUs on gpu003-gpu004" in text and "its job ends now" in text
    assert "sweep-1" in text and "it leaves the queue" in text
    assert 'href="/?state=running&amp;q=big"' in text
    assert Task.objects.filter(state="cancelled").count() == 0
    assert Task.objects.get(pk=big.pk).cancel_requested_at is None
    done = browser.post("/tasks/cancel/", {**ticked, "confirm": "yes"})
    assert done.status_code == 302 and done["Location"] == "/?state=running&q=big"
    said = browser.get(done["Location"]).content.decode()
    assert "Cancelled 1: sweep-1." in said and "Being cancelled 1: big-train." in said
    assert Task.objects.get(pk=waiting.pk).state == "cancelled"
    assert Task.objects.get(pk=big.pk).cancel_requested_at is not None


def test_bulk_cancel_reports_tasks_the_user_may_not_change(api, outsider_api, browser, site):
    mine = _task(api, "mine")
    theirs_doc = descriptor(name="theirs", project="genomics", type="hpc-simulation")
    theirs = Task.objects.get(pk=submit(outsider_api, theirs_doc).json()["id"])
    Task.objects.filter(pk__in=[mine.pk, theirs.pk]).update(state="waiting")
    # alice does not see bob's task at all: it is left out as if it did not exist.
    text = browser.post("/tasks/cancel/", {"task": [mine.pk, theirs.pk]}).content.decode()
    assert "Cancel 1 task?" in text and "theirs" not in text
    # The demo queue admin sees both (their queues' tasks) but may change neither.
    quinn = Client()
    quinn.force_login(User.objects.get(username="quinn"))
    text = quinn.post("/tasks/cancel/", {"task": [mine.pk, theirs.pk]}).content.decode()
    assert 'id="bulk-others"' in text and "mine" in text and "theirs" in text
    assert "None of the ticked tasks is yours to cancel." in text
    done = quinn.post(
        "/tasks/cancel/", {"task": [mine.pk, theirs.pk], "confirm": "yes"}, follow=True
    )
    assert "Not cancelled: theirs" in done.content.decode()
    assert Task.objects.filter(state="cancelled").count() == 0


@pytest.mark.parametrize("bad", [[], ["abc"], ["0"], ["٣"], ["9" * 40]])
def test_bulk_cancel_refuses_bad_ids_with_a_message(browser, site, bad):
    response = browser.post("/tasks/cancel/", {"task": bad}, follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "tick the tasks to cancel first" in text or "task ids are whole numbers" in text
