"""What every local job may use beyond what it asked for: the site's limits, and a process
limit small enough that the jobs its queue may run at once fit the host's process ids."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduling.backends.base import SubmitRequest
from scheduling.decisions.processes import job_processes, queue_concurrency
from scheduling.decisions.types import NodeView

DEFAULT_MAX_PROCESSES = 512
DEFAULT_MAX_OUTPUT_BYTES = 64 << 20
DEFAULT_MAX_DISK_BYTES = 10 << 30


@dataclass(frozen=True, slots=True)
class JobLimits:
    """What every local job may use beyond what it asked for (the site's settings)."""

    max_processes: int = DEFAULT_MAX_PROCESSES
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    max_disk_bytes: int = DEFAULT_MAX_DISK_BYTES
    # Why max_processes is below the site's limit, for the reason of a job killed by it.
    processes_note: str = ""


def limits_for(
    limits: JobLimits,
    request: SubmitRequest,
    inventory: Mapping[str, Sequence[NodeView]],
    *,
    pid_max: int,
) -> JobLimits:
    """The site's limits, with a process limit small enough that the jobs its queue may run
    at once fit this machine's process ids (decisions/processes.py)."""
    nodes = inventory.get(request.queue.pool) or inventory.get("") or ()
    concurrency = queue_concurrency(request.queue, nodes)
    limit = job_processes(limits.max_processes, concurrency, pid_max)
    if limit == limits.max_processes:
        return limits
    return dataclasses.replace(
        limits,
        max_processes=limit,
        processes_note=(
            f"queue {request.queue.name} may run {concurrency} jobs at once, within this "
            f"host's {pid_max} process ids"
        ),
    )
