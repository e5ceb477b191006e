from __future__ import annotations

import os

from celery import Celery, signals

from portal import broker

broker.register()

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


# Database connections in workers live as long as in web processes (CONN_MAX_AGE, closed at
# once when an error left them unusable). Celery's Django fix-up closes every connection
# before and after every task unless CELERY_DB_REUSE_MAX is set: on PostgreSQL that was a new
# server process per task, most of a dispatch's time. settings.py sets it high, so the
# fix-up closes only now and then, and Django's own rule decides in between.
@signals.task_prerun.connect(weak=False)
@signals.task_postrun.connect(weak=False)
def _close_old_connections(sender=None, **_kwargs) -> None:
    if sender is not None and getattr(sender.request, "is_eager", False):
        return  # run where it was sent (tests): the caller's connection, maybe mid-transaction
    from django.db import close_old_connections

    close_old_connections()
