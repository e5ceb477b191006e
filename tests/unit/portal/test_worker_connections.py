"""A worker keeps its database connection from one task to the next (config/celery.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery import signals
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from config.celery import app

TASK = SimpleNamespace(request=SimpleNamespace(is_eager=False))


def _after_a_task(fixup: DjangoWorkerFixup) -> None:
    """What a prefork worker runs around a task: Celery's fix-up, then the signal's receivers."""
    fixup.on_task_prerun(sender=TASK)
    signals.task_prerun.send(sender=None)
    fixup.on_task_postrun(sender=TASK)
    signals.task_postrun.send(sender=None)


@pytest.mark.django_db(transaction=True)  # autocommit, as in a worker
def test_a_usable_connection_is_kept_and_a_broken_one_replaced():
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    raw = connection.connection
    for _ in range(3):
        _after_a_task(fixup)
    assert connection.connection is raw, "the connection was closed between tasks"
    connection.errors_occurred = True  # as after a failed query
    connection.is_usable = lambda: False
    try:
        _after_a_task(fixup)
        assert connection.connection is None, "an unusable connection must be closed"
    finally:
        del connection.is_usable
    connection.ensure_connection()
    assert connection.connection is not raw


@pytest.mark.django_db
def test_an_eager_task_leaves_the_callers_connection_alone():
    # Eager Celery runs a task where it is sent, maybe inside the caller's transaction.
    connection.ensure_connection()
    raw = connection.connection
    eager = type("EagerTask", (), {"request": SimpleNamespace(is_eager=True)})  # hashable
    signals.task_prerun.send(sender=eager)
    signals.task_postrun.send(sender=eager)
    assert connection.connection is raw and not connection.closed_in_transaction
