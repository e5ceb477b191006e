"""Messages to the engine's workers, published once the transaction that asks for them commits.

Services and the engine name the Celery task they want by its registered name
(`scheduling/tasks.py` declares them), so nothing here imports the engine: the portal stays
above the engine, and the engine below its own Celery interface.

A broker that is down never turns a stored change into an error: every message has a
periodic sweep behind it that finds the rows it was about (docs/architecture.md).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction

from config import logcontext

log = logging.getLogger(__name__)

DISPATCH = "scheduling.dispatch"
DISPATCH_MANY = "scheduling.dispatch_many"
CANCEL = "scheduling.cancel"
NODES = "scheduling.nodes_apply"
CAPACITY = "scheduling.capacity_pass"
NOTIFY_END = "scheduling.notify_task_end"
SETTLE = "scheduling.settle_waiting"
TASKS_ENDED = "scheduling.tasks_ended"
RELEVEL = "scheduling.relevel"
STORAGE = "scheduling.storage_prepare"
STORAGE_LEAVE = "scheduling.storage_leave"
LEASE_PREPULL = "scheduling.lease_prepull"
MANY_CHUNK = 100  # task ids in one dispatch_many message


def dispatch(task_id: int, *, countdown: float = 0) -> None:
    """Dispatch the task (after `countdown` seconds) once the current transaction commits.

    Without a countdown the message leaves from this process's publisher thread, with the
    other dispatches committed meanwhile (see `Publisher`): the request that stored the task
    does not wait on the broker.
    """
    log.info("task %s: its dispatch is asked for", task_id, extra={"task_id": task_id})
    if countdown or not _in_background():
        _on_commit(DISPATCH, (task_id,), countdown=countdown, what=f"dispatch of task {task_id}")
    else:
        origin = logcontext.outgoing()  # the request's: the thread sends it on with the id
        transaction.on_commit(lambda: PUBLISHER.add(task_id, origin))


def dispatch_many(task_ids: Sequence[int]) -> None:
    """Dispatch these tasks once the transaction commits: a message per `MANY_CHUNK` ids, so
    several workers share a large batch."""
    ids = list(task_ids)
    log.info("dispatch of %d task(s) asked for", len(ids))
    for at in range(0, len(ids), MANY_CHUNK):
        chunk = ids[at : at + MANY_CHUNK]
        _on_commit(DISPATCH_MANY, (chunk,), what=f"dispatch of {len(chunk)} tasks")


def cancel(task_ids: Sequence[int]) -> None:
    """Carry out the cancel requests of these tasks: one message, however many tasks."""
    ids = list(task_ids)
    if ids:
        _on_commit(CANCEL, (ids,), what=f"cancel of {len(ids)} task(s)")


def settle(task_ids: Sequence[int]) -> None:
    """Settle these waiting tasks once the transaction commits: release the ones whose
    dependencies have all ended well (and trigger file, if any, exists), cancel those that
    never can run. One message, however many tasks; the timers pass is the safety net."""
    ids = list(task_ids)
    if ids:
        _on_commit(SETTLE, (ids,), what=f"settling of {len(ids)} waiting task(s)")


def tasks_ended(task_ids: Sequence[int]) -> None:
    """Run the task-end hooks (dependants and workflows settled, held tasks reconsidered,
    mails) for these tasks a service ended, in a worker once the transaction commits: one
    message, however many tasks. The timers pass settles dependants a lost message left
    waiting, the policy pass the held tasks; a lost mail stays lost."""
    ids = list(task_ids)
    if ids:
        _on_commit(TASKS_ENDED, (ids,), what=f"the end of {len(ids)} task(s)")


def relevel(task_ids: Sequence[int]) -> None:
    """Bring these tasks' levels and priority numbers up to date once the transaction commits
    (in the portal and in their backends); the policy pass is the safety net."""
    ids = list(task_ids)
    if ids:
        _on_commit(RELEVEL, (ids,), what=f"relevel of {len(ids)} task(s)")


def send(name: str, args: tuple[Any, ...], *, countdown: float = 0, what: str = "") -> None:
    """Publish now (outside a transaction, e.g. from a periodic task)."""
    try:
        task = current_app.tasks[name]  # looked up when sent: the registry, not an import
        if countdown:
            task.apply_async(args, countdown=countdown)
        else:
            task.apply_async(args)
    except Exception:  # noqa: BLE001 - any broker failure; the sweep is the safety net
        log.warning("could not enqueue %s; the sweep will", what or name, exc_info=True)


def notify_end(task_id: int) -> None:
    """Mail the owner that the task ended, once the transaction commits (no sweep: a lost
    message is a lost mail, never a lost change)."""
    _on_commit(NOTIFY_END, (task_id,), what=f"mail about task {task_id}")


def after_commit(name: str, args: tuple[Any, ...], *, what: str) -> None:
    """Publish another app's Celery task by its registered name once the transaction commits
    (the simulation app's, simulation/tasks.py): scheduling need not know it."""
    _on_commit(name, args, what=what)


def storage_prepare(user_id: int) -> None:
    """Make the user's storage folders (a worker does it, as root), once the transaction
    commits; a lost message only leaves them to their first job or next visit."""
    _on_commit(STORAGE, (user_id,), what=f"the storage folders of user {user_id}")


def storage_leave(project: str, user_id: int) -> None:
    """Take the job account of a member who left `project` out of its Unix group (a worker
    does it, as root), once the transaction commits; the storage pass catches a lost one."""
    _on_commit(STORAGE_LEAVE, (project, user_id), what=f"user {user_id} leaving {project}")


def _on_commit(name: str, args: tuple[Any, ...], *, countdown: float = 0, what: str) -> None:
    origin = logcontext.outgoing()  # sent with the log context of the code that asked

    def publish() -> None:
        with logcontext.fresh(origin):
            send(name, args, countdown=countdown, what=what)

    transaction.on_commit(publish)


def _in_background() -> bool:
    # Eager Celery (tests) runs a task where it is sent: it must be sent in the caller's thread.
    return settings.SWITCHYARD_PUBLISH_IN_BACKGROUND and not current_app.conf.task_always_eager


class Publisher:
    """Sends dispatch messages from a thread of this process.

    A request hands the committed task's id over and answers; the thread sends what has
    gathered since its last send as one message per `CHUNK` ids (`scheduling.dispatch_many`:
    the worker dispatches them in one pass), or a single dispatch for one id. Under load the
    ids gather while the last message is sent, so the broker sees fewer, larger messages;
    when idle, an id leaves at once. A process that dies with ids not sent loses no task: the
    pending sweep dispatches every task left pending (docs/architecture.md). At exit the
    thread is given a moment to send what it holds. Each id comes with the log context of
    the request that stored it, and its message carries it on (config/logcontext.py).
    """

    CHUNK = 25  # ids a message: two worker processes still share a burst
    # Under load (the last send was moments ago) a send waits this long for more ids; an id
    # arriving after a quiet spell leaves at once.
    LINGER_S = 0.005

    def __init__(self) -> None:
        self._ids: list[int] = []
        self._origins: dict[int, dict[str, Any]] = {}
        self._busy = False
        self._cond = threading.Condition()
        self._pid: int | None = None

    def add(self, task_id: int, origin: dict[str, Any] | None = None) -> None:
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child (no thread of ours)
                self._pid = os.getpid()
                self._ids, self._origins, self._busy = [], {}, False
                threading.Thread(target=self._run, name="switchyard-publisher", daemon=True).start()
            self._ids.append(task_id)
            self._origins[task_id] = origin or {}
            self._cond.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every id handed over has been sent; whether they all were in time."""
        with self._cond:
            if self._pid != os.getpid():
                return True  # no thread of this process holds anything
            return self._cond.wait_for(lambda: not self._ids and not self._busy, timeout)

    def _run(self) -> None:
        last_send = 0.0
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._ids)
                if time.monotonic() - last_send < 2 * self.LINGER_S:
                    # Busy: ids keep coming, so let a few more gather into this message.
                    self._cond.wait_for(lambda: len(self._ids) >= self.CHUNK, self.LINGER_S)
                ids, self._ids, self._busy = self._ids, [], True
                origins, self._origins = self._origins, {}
                last_send = time.monotonic()
            try:
                for at in range(0, len(ids), self.CHUNK):
                    chunk = ids[at : at + self.CHUNK]
                    with logcontext.fresh(logcontext.carried(chunk, origins)):
                        if len(chunk) == 1:
                            send(DISPATCH, (chunk[0],), what=f"dispatch of task {chunk[0]}")
                        else:
                            send(DISPATCH_MANY, (chunk,), what=f"dispatch of {len(chunk)} tasks")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()


PUBLISHER = Publisher()
atexit.register(PUBLISHER.flush, 5.0)
