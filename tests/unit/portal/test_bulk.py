"""bulk_insert: COPY on PostgreSQL (CI), bulk_create elsewhere; the same rows either way.
update_rows: each row its own values, in one UPDATE."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from config.bulk import bulk_insert, insert_together, next_id, update_rows
from portal.models import AuditEvent
from scheduling.models import Task, TaskEvent
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

QUOTED = 'back\\slash, "quotes", \\N, ü 漢字 and a tab\t'
AWKWARD = 'tab\there, newline\nthere, back\\slash, "quotes", \\N, ü 漢字, \r end'


def test_rows_come_back_with_their_ids_and_exactly_the_values_given(api):
    response = submit(api, descriptor(name="template"))
    assert response.status_code == 201, response.json()
    template = Task.objects.get(pk=response.json()["id"])
    skip = {"id", "submitted_at", "updated_at"}
    values = {
        f.attname: getattr(template, f.attname)
        for f in Task._meta.concrete_fields
        if f.attname not in skip
    }
    spec = {**template.spec, "env": [["X", AWKWARD]], "none": None, "nested": {"a": [1, 2.5]}}
    new = [
        Task(**{**values, "name": f"bulk-{i}", "descriptor": AWKWARD, "spec": spec})
        for i in range(3)
    ]
    with transaction.atomic():
        stored = bulk_insert(new, batch_size=2)  # two chunks
    assert [t.pk for t in stored] == [t.pk for t in new] and all(t.pk for t in new)
    assert len({t.pk for t in new}) == 3 and min(t.pk for t in new) > template.pk
    assert not new[0]._state.adding
    for task in new:
        row = Task.objects.get(pk=task.pk)
        assert row.name == task.name and row.descriptor == AWKWARD and row.spec == spec
        assert row.exit_code is None and row.submitted_at == task.submitted_at
    now = timezone.now()
    events = bulk_insert(
        [TaskEvent(task=t, at=now, from_state="", to_state="pending", message=AWKWARD) for t in new]
    )
    assert [e.task_id for e in events] == [t.pk for t in new]
    assert TaskEvent.objects.get(pk=events[1].pk).message == AWKWARD
    # The next ordinary insert takes an id after them: the sequence moved on.
    after = Task.objects.create(**{**values, "name": "after"})
    assert after.pk > max(t.pk for t in new)


def test_it_copies_on_postgresql_and_creates_in_bulk_elsewhere(api):
    response = submit(api, descriptor(name="template"))
    template = Task.objects.get(pk=response.json()["id"])
    events = [TaskEvent(task=template, at=timezone.now(), to_state="pending") for _ in range(5)]
    with CaptureQueriesContext(connection) as queries, transaction.atomic(savepoint=False):
        bulk_insert(events)
    # PostgreSQL: one query draws the ids, and the rows go by COPY (not a query Django
    # sees); SQLite: one INSERT of them all.
    first = {"postgresql": "SELECT nextval(", "sqlite": "INSERT INTO"}[connection.vendor]
    assert [q["sql"][: len(first)] for q in queries.captured_queries] == [first]
    assert TaskEvent.objects.filter(pk__in=[e.pk for e in events]).count() == 5


@pytest.mark.django_db(transaction=True)  # autocommit, as a request runs
def test_a_submission_on_postgresql_is_one_id_and_one_query_all_or_nothing(api, postgres_only):
    assert submit(api, descriptor(name="first")).status_code == 201  # the site read once
    with CaptureQueriesContext(connection) as queries:
        response = submit(api, descriptor(name="fast", env={"NOTE": QUOTED}))
    assert response.status_code == 201, response.json()
    writes = [q["sql"] for q in queries.captured_queries if not q["sql"].startswith("SELECT")]
    assert [w.count("INSERT INTO") for w in writes] == [3], writes  # one query, three rows
    task = Task.objects.get(pk=response.json()["id"])
    event = TaskEvent.objects.get(task=task)
    assert event.at == task.submitted_at and event.to_state == "pending"
    assert task.updated_at is not None and task.spec["env"] == {"NOTE": QUOTED}
    row = AuditEvent.objects.get(target=f"task #{task.pk}")
    assert row.action == "task.submit" and row.actor == "alice" and row.at is not None
    # The statements are one transaction: a failing one leaves none of the rows.
    doomed = Task(**{f.attname: getattr(task, f.attname) for f in Task._meta.concrete_fields})
    doomed.pk = next_id(Task)
    clash = TaskEvent(pk=event.pk, task=doomed, at=event.at, to_state="pending")
    with pytest.raises(IntegrityError):
        insert_together([doomed, clash])
    assert not Task.objects.filter(pk=doomed.pk).exists()


def test_each_row_gets_its_own_values_in_one_update(api):
    ids = []
    for i in range(3):
        response = submit(api, descriptor(name=f"upd-{i}"))
        assert response.status_code == 201, response.json()
        ids.append(response.json()["id"])
    untouched = submit(api, descriptor(name="upd-other")).json()["id"]
    when = timezone.now()
    rows = [
        (
            ids[0],
            {
                "reason": AWKWARD,
                "exit_code": 0,
                "started_at": when,
                "admitted": True,
                "spec": {"env": [["X", QUOTED]]},
                "state": "queued",
            },
        ),
        (
            ids[1],
            {
                "reason": "",
                "exit_code": None,
                "started_at": None,
                "admitted": False,
                "spec": {},
                "state": "queued",
            },
        ),
        (
            ids[2],
            {
                "reason": "plain",
                "exit_code": 137,
                "started_at": when,
                "admitted": True,
                "spec": {"n": [1, 2.5, None]},
                "state": "queued",
            },
        ),
    ]
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        assert update_rows(Task, rows) == 3
    assert len([q for q in queries.captured_queries if q["sql"].startswith("UPDATE")]) == 1
    for key, values in rows:
        row = Task.objects.get(pk=key)
        assert {name: getattr(row, name) for name in values} == values
    assert Task.objects.get(pk=untouched).state == "pending"
    assert update_rows(Task, []) == 0
