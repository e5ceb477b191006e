"""What an exec costs the database: the sandbox read, one insert and one update of its own
row (docs/sandboxes.md, "Measured"). A create's queries are counted too, so that a change
that adds to them is seen."""

from __future__ import annotations

import statistics
import time

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from scheduling.engine import sandboxes as door
from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


def _kinds(queries) -> list[str]:
    return [q["sql"].split()[0].upper() for q in queries]


def test_an_exec_is_one_read_one_insert_and_one_update(api):
    sid = create(api).json()["id"]
    run(api, sid, ["true"])  # the site view and the project are cached after the first
    with CaptureQueriesContext(connection) as seen:
        assert run(api, sid, ["echo", "x"]).status_code == 200
    assert _kinds(seen.captured_queries) == ["SELECT", "INSERT", "UPDATE"], [
        q["sql"][:120] for q in seen.captured_queries
    ]


def test_a_create_stays_within_its_query_budget(api):
    create(api)  # warm the caches (site view, membership)
    with CaptureQueriesContext(connection) as seen:
        assert create(api).status_code == 201
    print(f"create: {len(seen.captured_queries)} queries: {_kinds(seen.captured_queries)}")
    assert len(seen.captured_queries) <= 40


def test_the_planes_own_time_per_create_and_exec(api):
    """The fake backend answers at once: what is left is the plane (API, service, door,
    database). Printed for docs/sandboxes.md, "Measured"; bounded loosely here."""
    door.warm_pass()
    creates, execs = [], []
    ids = []
    for _ in range(10):
        started = time.perf_counter()
        made = create(api)
        creates.append((time.perf_counter() - started) * 1000)
        assert made.status_code == 201
        ids.append(made.json()["id"])
    for i in range(200):
        started = time.perf_counter()
        assert run(api, ids[i % len(ids)], ["true"]).status_code == 200
        execs.append((time.perf_counter() - started) * 1000)
    p50c, p50e = statistics.median(creates), statistics.median(execs)
    p99e = statistics.quantiles(execs, n=100)[98]
    print(
        f"{connection.vendor}: create p50 {p50c:.1f} ms; exec p50 {p50e:.2f} ms p99 {p99e:.2f} ms"
    )
    assert p50e < 50 and p50c < 500
