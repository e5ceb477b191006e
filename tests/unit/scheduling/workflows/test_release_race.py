"""Workflows: two workers releasing the same dependant dispatch it once."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from scheduling.backends.fake import FakeBackend
from scheduling.engine import get_backend, settle
from scheduling.models import Task, TaskEvent, Workflow
from tests.unit.scheduling.workflows.helpers import (
    _post,
    task,
    workflow,
)

pytestmark = pytest.mark.django_db


# --- the release race -------------------------------------------------------------------------


# Two connections really race only on PostgreSQL: SQLite runs one writer at a time
# (the `postgres_only` fixture, tests/conftest.py).


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("entry", ["settle_waiting", "after_ends"])
def test_two_workers_releasing_the_same_dependant_dispatch_it_once(
    postgres_only, api, monkeypatch, entry
):
    response = _post(api, workflow(task("a"), task("b", "a")))
    assert response.status_code == 201, response.json()
    wf = Workflow.objects.get(pk=response.json()["id"])
    a, b = wf.tasks.get(name="a"), wf.tasks.get(name="b")
    assert b.state == "waiting"
    # a has succeeded; both workers see it and settle its dependant at the same moment.
    Task.objects.filter(pk=a.pk).update(state="succeeded")
    a.refresh_from_db()

    # Hold each worker at its write until both have read b as waiting: the worst interleaving.
    real_set_state = settle.task_set_state
    at_write = threading.Barrier(2, timeout=10)

    def set_state_after_both_read(**kwargs):
        if kwargs["task"].pk == b.pk and kwargs["to"] == "pending":
            at_write.wait()
        return real_set_state(**kwargs)

    monkeypatch.setattr(settle, "task_set_state", set_state_after_both_read)
    start = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            start.wait()
            if entry == "settle_waiting":
                settle.settle_waiting([b.pk])
            else:
                settle.after_ends([Task.objects.get(pk=a.pk)])
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors

    b.refresh_from_db()
    assert b.state == "queued" and b.attempts == 1
    jobs = [k for k in FakeBackend.jobs_for("fake") if k.startswith(f"sy-{b.pk}-")]
    assert len(jobs) == 1
    assert TaskEvent.objects.filter(task=b, from_state="waiting", to_state="pending").count() == 1
    submits = [c for c in get_backend("fake").calls if c[0] == "submit" and c[1][0].key in jobs]
    assert len(submits) == 1
