"""`manage.py check`: the configuration the local backend cannot honour on this machine."""

from __future__ import annotations

from django.conf import settings
from django.core import checks
from django.db import DatabaseError

from scheduling import host
from scheduling.decisions.processes import concurrency_error, per_job_error


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
    from scheduling.models import Queue

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
