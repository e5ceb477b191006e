"""Celery tasks of accounting: ids in, call the metering and reconciliation."""

from __future__ import annotations

from celery import shared_task

from accounting import meter, reconcile, services
from config.locks import exclusive

METER = "accounting.meter"


@shared_task(name=METER, acks_late=True)
def meter_attempts(attempt_ids: list[int]) -> int:
    return meter.meter(attempt_ids)


@shared_task(name="accounting.meter_pass", acks_late=True)
def meter_pass() -> dict:
    with exclusive("meter-pass") as held:
        return meter.meter_pass() if held else {"skipped": "another pass runs"}


@shared_task(name="accounting.reconcile_pass", acks_late=True)
def reconcile_pass() -> dict:
    with exclusive("reconcile-pass") as held:
        return reconcile.reconcile_pass() if held else {"skipped": "another pass runs"}


@shared_task(name=services.RECONCILE_NOW, acks_late=True)
def reconcile_now() -> dict:
    """A reconcile an admin asked for (the page's button, the API's POST): the periodic
    pass's work, at once. A periodic pass running meanwhile is that work already."""
    try:
        with exclusive("reconcile-pass") as held:
            return reconcile.reconcile_pass() if held else {"skipped": "another pass runs"}
    finally:
        services.reconcile_now_done()
