"""Dashboards, templates and "submit again", over-request advice, mail when a task ends."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib.auth.models import User
from django.core import mail
from django.test import Client
from django.utils import timezone

from accounting import dashboards
from portal.models import UserSettings
from scheduling import notifications
from scheduling.engine.samples import take_sample
from scheduling.models import Attempt, AttemptState, LoadSample, Queue, Task
from scheduling.presenters.efficiency import task_efficiency
from scheduling.states import task_set_state
from tests.conftest import descriptor, submit


def _page(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


def _tasks(api, n: int, **fields) -> list[Task]:
    return [Task.objects.get(pk=submit(api, descriptor(**fields)).json()["id"]) for _ in range(n)]


def test_the_researchers_dashboard_counts_their_work_and_explains_waits(api, outsider_api):
    mine = _tasks(api, 3, type="hpc-simulation", queue="hpc")
    _tasks(outsider_api, 2, project="genomics")
    Task.objects.filter(pk=mine[0].pk).update(state="running", started_at=timezone.now())
    Task.objects.filter(pk=mine[1].pk).update(reason="held by quota cpus in hpc")
    data = dashboards.researcher(User.objects.get(username="alice"))
    assert (data["running"], data["waiting_count"]) == (1, 2)
    assert [t.pk for t in data["waiting"]] == [mine[1].pk, mine[2].pk]
    assert [w["type"] for w in data["waits"]] == ["hpc-simulation"]
    page = _page("alice").get("/dashboard/")
    assert page.status_code == 200
    assert b"held by quota cpus in hpc" in page.content and b"chart-waits" in page.content
    fragment = _page("alice").get("/dashboard/", HTTP_HX_REQUEST="true")
    assert b"<html" not in fragment.content and b"tile-running" in fragment.content


def test_the_site_dashboard_samples_load_and_is_for_operators(api, site):
    tasks = _tasks(api, 4, type="hpc-simulation", queue="hpc", resources={"cpus": 8})
    Task.objects.filter(pk__in=[t.pk for t in tasks[:2]]).update(state="running")
    Task.objects.filter(pk=tasks[2].pk).update(state="waiting", hold="quota")
    take_sample(timezone.now() - timedelta(minutes=1))
    take_sample()
    hpc = Queue.objects.get(name="hpc")
    latest = LoadSample.objects.filter(queue=hpc).order_by("-at").first()
    assert (latest.waiting, latest.running, latest.cpus_busy) == (2, 2, 16)
    quinn = User.objects.get(username="quinn")
    quinn.administered_queues.set([hpc])
    data = dashboards.site(quinn, dashboards.operator_queues(quinn))
    assert [r["queue"] for r in data["now"]] == ["hpc"]
    assert dict(data["reasons"]) == {
        "held: a quota": 1,
        "pending: being dispatched": 1,
    }
    figure = json.loads(data["figures"]["depth"])
    assert figure["data"][0]["name"] == "hpc" and figure["data"][0]["y"][-1] == 2
    assert _page("quinn").get("/dashboard/site/").status_code == 200
    assert _page("alice").get("/dashboard/site/").status_code == 404
    assert b"inference-agent" not in _page("quinn").get("/dashboard/site/").content


def test_templates_and_submit_again_fill_the_form(api, browser):
    page = browser.get("/tasks/new/?template=ai-training").content.decode()
    assert 'value="train-model"' in page and 'value="8h"' in page
    assert browser.get("/tasks/new/?template=nonsense").status_code == 200
    task = _tasks(api, 1, name="original")[0]
    again = browser.get(f"/tasks/new/?from={task.pk}").content.decode()
    assert "original" in again and "apiVersion" in again
    detail = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert f"/tasks/new/?from={task.pk}" in detail
    # a task you cannot see is not a template
    bob = _page("bob")
    assert bob.get(f"/tasks/new/?from={task.pk}").status_code == 404


def _ended_with(task: Task, *, cpu_ms: int, elapsed_ms: int) -> None:
    now = timezone.now()
    Attempt.objects.create(
        task=task,
        number=1,
        key=f"k-{task.pk}",
        state=AttemptState.SUCCEEDED,
        started_at=now - timedelta(milliseconds=elapsed_ms),
        ended_at=now,
        cpu_ms=cpu_ms,
        cpu_elapsed_ms=elapsed_ms,
    )
    Task.objects.filter(pk=task.pk).update(state="succeeded", ended_at=now)


def test_over_requests_are_advised_on_the_task_page_and_in_the_report(api, browser):
    task = _tasks(api, 1, type="hpc-simulation", queue="hpc", resources={"cpus": 8})[0]
    _ended_with(task, cpu_ms=2 * 3_600_000, elapsed_ms=3_600_000)  # 2 of 8 CPUs busy for 1 h
    found = task_efficiency(Task.objects.get(pk=task.pk))
    assert (found.used_cpus, round(found.percent)) == (2.0, 25)
    assert found.advice().startswith("Asked 8 CPUs, used 2.0 on average (25 %)")
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert "Asked 8 CPUs, used 2.0 on average" in page
    report = dashboards.researcher(User.objects.get(username="alice"))["efficiency"]
    assert report[0]["type"] == "hpc-simulation" and round(report[0]["percent"]) == 25
    assert round(report[0]["asked_core_hours"], 3) == 8.0
    fitting = _tasks(api, 1, type="hpc-simulation", queue="hpc", resources={"cpus": 4})[0]
    _ended_with(fitting, cpu_ms=int(3.8 * 3_600_000), elapsed_ms=3_600_000)
    assert task_efficiency(Task.objects.get(pk=fitting.pk)).advice() is None


def test_a_task_end_is_mailed_when_asked(api, settings, django_capture_on_commit_callbacks):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    asked = _tasks(api, 1, notify="end")[0]
    quiet = _tasks(api, 1)[0]
    refused = _tasks(api, 1, notify="none")[0]
    assert notifications.wants_mail([asked, quiet, refused]) == [asked]
    UserSettings.objects.create(user=User.objects.get(username="alice"), email_on_task_end=True)
    assert notifications.wants_mail([asked, quiet, refused]) == [asked, quiet]
    with django_capture_on_commit_callbacks(execute=False) as published:
        task_set_state(task=Task.objects.get(pk=asked.pk), to="cancelled", reason="test")
    assert published, "the end publishes the mail on commit"
    assert notifications.send_task_end(asked.pk)
    assert mail.outbox[-1].to == ["alice@example.org"]
    assert f"Task #{asked.pk}" in mail.outbox[-1].body and "cancelled" in mail.outbox[-1].subject
    bad = submit(api, descriptor(notify="always"))
    assert bad.status_code == 400 and bad.json()["errors"][0]["field"] == "notify"
