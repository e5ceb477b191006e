"""A user's cancel stores the end in the request; a worker runs the task-end hooks.

The engine's reactions to an end (settling dependants and workflows, releasing held tasks,
the owner's mail) never run inside a web request: the service publishes one message with
the ended ids, and `scheduling.tasks_ended` runs every hook for them, safely twice.
"""

from __future__ import annotations

import pytest
from django.core import mail

from scheduling import outbox
from scheduling.engine import settle
from scheduling.models import Task, TaskEvent
from scheduling.tasks import tasks_ended, timers
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db


def _pair(api) -> tuple[int, int]:
    """A pending task and a task waiting on it."""
    a = submit(api, descriptor(name="a")).json()["id"]
    b = submit(api, descriptor(name="b", depends_on=[a])).json()["id"]
    assert Task.objects.get(pk=a).state == "pending"
    assert Task.objects.get(pk=b).state == "waiting"
    return a, b


@pytest.fixture
def settled(monkeypatch) -> list[list[int]]:
    calls: list[list[int]] = []
    real = settle.settle_waiting
    monkeypatch.setattr(
        settle, "settle_waiting", lambda ids: (calls.append(list(ids)), real(ids))[1]
    )
    return calls


@pytest.fixture
def sent(monkeypatch) -> list[tuple[str, tuple]]:
    """The messages published, by name (still sent on, so an eager worker runs them)."""
    names: list[tuple[str, tuple]] = []
    real = outbox.send
    monkeypatch.setattr(
        outbox,
        "send",
        lambda name, args, **kw: (names.append((name, args)), real(name, args, **kw)),
    )
    return names


def test_a_cancel_over_http_settles_nothing_in_the_request_and_the_worker_does(
    api, worker, settled, sent
):
    a, b = _pair(api)
    with worker():
        r = api.post(f"/api/v1/tasks/{a}/cancel/")
        assert r.status_code == 200, r.json()
        assert r.json()["state"] == "cancelled"
        # The request has answered: the end is stored, the engine has not run.
        assert settled == []
        assert Task.objects.get(pk=b).state == "waiting"
    assert (outbox.TASKS_ENDED, ([a],)) in sent
    assert settled == [[b]]
    assert Task.objects.get(pk=b).state == "cancelled"


def test_the_end_message_run_twice_changes_nothing(api, worker, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    a = submit(api, descriptor(name="a", notify="end")).json()["id"]
    b = submit(api, descriptor(name="b", depends_on=[a])).json()["id"]
    with worker():
        assert api.post(f"/api/v1/tasks/{a}/cancel/").status_code == 200
    assert Task.objects.get(pk=b).state == "cancelled"
    mails = [m for m in mail.outbox if f"task #{a} " in m.subject]
    assert len(mails) == 1, [m.subject for m in mail.outbox]
    events = TaskEvent.objects.count()
    with worker():
        tasks_ended.delay([a])  # a redelivery
    assert TaskEvent.objects.count() == events
    assert Task.objects.get(pk=b).state == "cancelled"
    assert len([m for m in mail.outbox if f"task #{a} " in m.subject]) == 1


def test_a_workflow_cancel_publishes_one_end_message_for_all_it_cancelled(api, worker, sent):
    one = {k: v for k, v in descriptor(name="one").items() if k not in ("apiVersion", "kind")}
    two = {**one, "name": "two", "depends_on": ["one"]}
    doc = {**descriptor(name="w"), "kind": "Workflow", "tasks": [one, two]}
    for field in ("resources", "walltime", "command"):
        del doc[field]
    r = api.post("/api/v1/workflows/", data=doc, format="json")
    assert r.status_code == 201, r.json()
    workflow = r.json()["id"]
    ids = sorted(Task.objects.filter(workflow_id=workflow).values_list("pk", flat=True))
    with worker():
        assert api.post(f"/api/v1/workflows/{workflow}/cancel/").status_code == 200
    ended = [args for name, args in sent if name == outbox.TASKS_ENDED]
    assert len(ended) == 1 and sorted(ended[0][0]) == ids
    assert set(Task.objects.filter(pk__in=ids).values_list("state", flat=True)) == {"cancelled"}


def test_a_lost_end_message_is_made_up_by_the_timers_pass(api, django_capture_on_commit_callbacks):
    a, b = _pair(api)
    with django_capture_on_commit_callbacks(execute=False) as published:
        assert api.post(f"/api/v1/tasks/{a}/cancel/").status_code == 200
    assert published  # never run: the broker was down
    assert Task.objects.get(pk=b).state == "waiting"
    timers()
    assert Task.objects.get(pk=b).state == "cancelled"
    assert "depends on a" in Task.objects.get(pk=b).reason
