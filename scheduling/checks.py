"""`manage.py check`: the configuration the local backend cannot honour on this machine, and
storage that a job could fill together with the portal's own files (its jobs' control groups:
engine/checks.py)."""

from __future__ import annotations

import os

from django.conf import settings
from django.core import checks
from django.db import DatabaseError

from scheduling import host
from scheduling.decisions.processes import concurrency_error, per_job_error
from scheduling.models import Queue, StorageArea


@checks.register(checks.Tags.compatibility)
def local_process_limits(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """The per-job process limit and every local queue's max_concurrency fit kernel.pid_max
    (decisions/processes.py); the queue form and the admin console refuse the same."""
    aliases = [alias for alias in settings.COMPUTE_BACKENDS if host.is_local(alias)]
    if not aliases:
        return []
    pid_max = host.pid_max()
    found: list[checks.CheckMessage] = []
    per_job = settings.SWITCHYARD_JOB_MAX_PROCESSES
    if why := per_job_error(per_job, pid_max):
        found.append(
            checks.Error(
                f"SWITCHYARD_JOB_MAX_PROCESSES: {why}; got {per_job}",
                id="switchyard.E101",
            )
        )
    try:
        queues = list(
            Queue.objects.filter(pool__backend__in=aliases, max_concurrency__isnull=False)
            .select_related("pool")
            .order_by("name")
        )
    except DatabaseError:
        return found  # not migrated yet: nothing stored to check
    for queue in queues:
        if why := concurrency_error(queue.max_concurrency, pid_max):
            found.append(
                checks.Error(
                    f"queue {queue.name} (pool {queue.pool.name}, backend {queue.pool.backend}) "
                    f"max_concurrency: {why}; got {queue.max_concurrency}",
                    obj=queue,
                    id="switchyard.E102",
                )
            )
    return found


@checks.register(checks.Tags.compatibility)
def storage_apart_from_var(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """A storage area on the file system of the var folder: a job's writes there are bounded
    by that file system's quotas only (docs/security.md, "Limits"), so a job that fills the
    area fills the portal's database and logs too. The demo's areas live there on purpose."""
    var = _device(str(settings.VAR_DIR))
    demo = os.path.realpath(settings.SWITCHYARD_DEMO_STORAGE_DIR)
    try:
        areas = list(StorageArea.objects.order_by("name"))
    except DatabaseError:
        return []  # not migrated yet
    found: list[checks.CheckMessage] = []
    for area in areas:
        base = area.path.split("{", 1)[0]
        if _inside(base, demo):
            continue
        # An area not mounted here (a web-only host) cannot be told apart: not reported.
        if var is not None and _device(base) == var:
            found.append(
                checks.Warning(
                    f"storage area {area.name} ({area.path}) is on the file system that holds "
                    f"the var folder ({settings.VAR_DIR}): a job that fills the area fills "
                    "the portal's database and logs too",
                    hint="put the area on a file system of its own, with quotas",
                    obj=area,
                    id="switchyard.W103",
                )
            )
    return found


def _device(path: str) -> int | None:
    """The device of the file system `path` is on; None where it is not (yet) there."""
    try:
        return os.stat(path).st_dev
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None


def _inside(path: str, folder: str) -> bool:
    try:
        real = os.path.realpath(path)
    except ValueError:  # a NUL in the path
        return False
    return real == folder or real.startswith(folder + os.sep)
