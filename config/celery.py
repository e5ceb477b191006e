from __future__ import annotations

import contextlib
import os

from celery import Celery, signals
from celery.worker.consumer import Consumer as CeleryConsumer
from django.conf import settings

from config import logcontext
from config.logformat import apply_to
from config.metrics import instruments
from config.runtime import broker

broker.register()

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

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


# A message carries the log context of the code that published it (a request's id and user,
# a task's id) in a header of its own; the worker runs it in that context, so one task's path
# can be followed from the request to the worker and on (docs/operations.md, "Logs").
LOG_HEADER = "switchyard_log"


@signals.before_task_publish.connect(weak=False)
def _carry_log_context(headers=None, **_kwargs) -> None:
    if headers is not None:
        headers[LOG_HEADER] = logcontext.outgoing()


@signals.task_prerun.connect(weak=False)
def _open_log_context(task=None, **_kwargs) -> None:
    if task is None:
        return
    request = task.request
    stack = contextlib.ExitStack()
    if getattr(request, "is_eager", False):
        # Run where it was sent (tests): in the sender's context, as a worker would be.
        stack.enter_context(logcontext.bound(celery_task=task.name, celery_id=request.id))
    else:
        carried = getattr(request, LOG_HEADER, None)
        carried = dict(carried) if isinstance(carried, dict) else {}
        # A message from a beat or an older sender: an id of its own, for what it sends on.
        carried.setdefault("request_id", logcontext.new_request_id())
        worker = {"celery_task": task.name, "celery_id": request.id}
        stack.enter_context(logcontext.fresh({**carried, **worker}))
    request._switchyard_log_context = stack


@signals.task_postrun.connect(weak=False)
def _close_log_context(task=None, **_kwargs) -> None:
    stack = getattr(getattr(task, "request", None), "_switchyard_log_context", None)
    if stack is not None:
        stack.close()


@signals.after_setup_logger.connect(weak=False)
@signals.after_setup_task_logger.connect(weak=False)
def _log_format(logger=None, **_kwargs) -> None:
    """The worker's lines in the portal's format, with the context's fields: Celery set up
    its own handlers (with the level of `--loglevel`); they get the portal's filter and
    formatter."""
    if logger is not None:
        apply_to(logger, fmt=settings.SWITCHYARD_LOG_FORMAT)


# Metrics (docs/operations.md): a task that raised, by name; and the worker's heartbeat, which
# the beat's passes every few seconds keep fresh while the worker works.
@signals.task_failure.connect(weak=False)
def _count_failure(sender=None, **_kwargs) -> None:
    instruments.celery_task_failed(getattr(sender, "name", None) or "unknown")


@signals.task_postrun.connect(weak=False)
def _worker_heartbeat(sender=None, **_kwargs) -> None:
    if sender is not None and getattr(sender.request, "is_eager", False):
        return
    instruments.worker_alive()


class Consumer(CeleryConsumer):
    """Celery's consumer, kept alive through a broker restart (`CELERY_WORKER_CONSUMER`).

    When the broker connection breaks, Celery 5.7.0 collects it — which detaches its
    transport from the connection's settings — and then closes it. With messages
    unacknowledged (any `acks_late` task running at that moment, which under load is nearly
    always), the close hands them back through that transport, and the running task's own
    ack later goes through it too; both need the settings to reach Redis and fail with
    `AttributeError: 'NoneType' object has no attribute 'hostname'`, which Celery takes for
    an unrecoverable error: the worker exits and every later task stays pending.

    So the transport gets its settings back right after the collect: the close then hands
    the messages back if Redis is there again (a connection error if not, which Celery
    ignores), and a running task's ack reaches the restarted Redis, or is logged as not
    acknowledged; Redis then delivers that message again after the visibility timeout (the
    tasks are safe to repeat). The consumer reconnects as after any connection loss.
    """

    def on_connection_error_after_connected(self, exc):
        connection = self.connection
        if connection is not None and connection._transport is not None:
            transport, collect = connection._transport, connection.collect

            def collect_keeping_settings(*args, **kwargs):
                try:
                    collect(*args, **kwargs)
                finally:
                    transport.client = connection

            connection.collect = collect_keeping_settings
        super().on_connection_error_after_connected(exc)
