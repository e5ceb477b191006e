"""Showing a job as running the moment it starts, not at the next poll.

A job the local backend placed on a node starts some 20 ms after it was submitted (its
supervisor starts, then the sandbox). Left to the poll, its task would show `queued` until
the next cycle (a second by default). So a dispatch that has just queued such jobs has them
watched for SWITCHYARD_START_WAIT_MS: those that start (or already end) meanwhile are moved
on at once, with the poll's own `apply_jobs`. Those still starting then are the poll's, as
they always were: watching only brings the news forward, it is never the only one to bring it.

In a worker the dispatch hands its jobs to this process's watcher thread and takes its next
message; the thread reads their states every few milliseconds. Anywhere else (a test, a
management command, eager Celery) the dispatch waits for the starts itself.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from celery import current_task
from django.conf import settings
from django.db import close_old_connections, connections

from scheduling import hooks
from scheduling.backends import Job
from scheduling.engine.follow import apply_jobs
from scheduling.engine.registry import get_backend
from scheduling.models import Task

log = logging.getLogger(__name__)


def watch_starts(backend, task_ids: dict[str, int]) -> None:
    """Have the jobs just queued (backend id → task id) shown running once they start, if
    the backend can say so at once (`started`)."""
    within = settings.SWITCHYARD_START_WAIT_SECONDS
    if not task_ids or within <= 0 or not backend.shows_starts:
        return
    if current_task and not current_task.request.is_eager:  # in a worker's task
        WATCHER.watch(backend.alias, task_ids, within)
    else:
        show_started(task_ids, backend.started(list(task_ids), within_s=within))


def show_started(task_ids: dict[str, int], started: dict[str, Job]) -> None:
    """Bring the tasks of jobs that have started (or ended) in line with them."""
    if not started:
        return
    tasks = Task.objects.in_bulk([task_ids[backend_id] for backend_id in started])
    pairs = []
    for backend_id, job in started.items():
        task = tasks.get(task_ids[backend_id])
        if task is not None and task.backend_id == backend_id:
            pairs.append((task, job))
    with hooks.gathered():  # a job that already ended: the end hooks once for all
        apply_jobs(pairs)


class StartWatcher:
    """A thread of this process that watches just-queued jobs until they start."""

    TICK_S = 0.002
    # The thread's database connection is closed after this long with nothing to watch.
    LINGER_S = 1.0

    def __init__(self) -> None:
        self._cond = threading.Condition()
        # (backend alias, backend id) → (task id, until when it is watched)
        self._jobs: dict[tuple[str, str], tuple[int, float]] = {}
        self._pid: int | None = None
        self._connected = False

    def watch(self, alias: str, task_ids: dict[str, int], within_s: float) -> None:
        until = time.monotonic() + within_s
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child (no thread of ours)
                self._pid = os.getpid()
                self._jobs = {}
                threading.Thread(target=self._run, name="switchyard-starts", daemon=True).start()
            for backend_id, task_id in task_ids.items():
                self._jobs[(alias, backend_id)] = (task_id, until)
            self._cond.notify_all()

    def idle(self, timeout: float) -> bool:
        """Wait until nothing is watched and the thread's connection is closed; whether that
        happened within `timeout`."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._jobs and not self._connected, timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                if not self._cond.wait_for(lambda: self._jobs, self.LINGER_S):
                    if self._connected:
                        connections.close_all()  # this thread's only
                        self._connected = False
                        self._cond.notify_all()
                    continue
                now = time.monotonic()
                for key in [key for key, (_, until) in self._jobs.items() if until <= now]:
                    del self._jobs[key]  # still starting: the poll's
                watched = dict(self._jobs)
                self._cond.notify_all()
            try:
                self._look(watched)
            except Exception:  # noqa: BLE001 - the poll brings the news instead
                log.warning("could not show the jobs that started", exc_info=True)
                with self._cond:
                    self._jobs.clear()
                    self._cond.notify_all()
            time.sleep(self.TICK_S)

    def _look(self, watched: dict[tuple[str, str], tuple[int, float]]) -> None:
        by_alias: dict[str, dict[str, int]] = {}
        for (alias, backend_id), (task_id, _) in watched.items():
            by_alias.setdefault(alias, {})[backend_id] = task_id
        for alias, task_ids in by_alias.items():
            backend = get_backend(alias)
            if not backend.shows_starts:  # watch_starts takes only such backends
                continue
            started = backend.started(list(task_ids), within_s=0)
            if not started:
                continue
            try:
                self._connected = True
                show_started(task_ids, started)
            finally:
                close_old_connections()  # this thread's own; as a worker does between tasks
                with self._cond:
                    for backend_id in started:
                        self._jobs.pop((alias, backend_id), None)
                    self._cond.notify_all()


WATCHER = StartWatcher()
