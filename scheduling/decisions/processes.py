"""How many processes a local job may have, so that the jobs of a queue fit the host's pids.

Pure. Every local job runs on one machine, whose process ids (and threads: each takes one)
are bounded by kernel.pid_max — 32,768 on many hosts. The site's per-job limit
(`SWITCHYARD_JOB_MAX_PROCESSES`, 512) times the jobs a queue may run at once can be far
more (500 × 512), and then a burst of jobs that each fork up to their limit takes every pid of
the machine: nothing else, the portal included, can start a process.

The queue's concurrency is the operator's decision about throughput, and they see and edit
it per queue; the per-job limit is a ceiling against runaway jobs. So where both cannot hold,
a queue's jobs get a smaller ceiling (`job_processes`): its jobs together then fit the pids
the host does not keep for itself. The bound is per queue because a queue is where one
burst lands (tasks route to queues by type); queues of one host that each fill their share
at the same moment can still together hold more, which is why a share is a ceiling and not
a reservation. A concurrency too high to leave each job even `MIN_JOB_PROCESSES` is refused
(`concurrency_error`).
"""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.decisions.types import NodeView, QueuePolicy

MIN_JOB_PROCESSES = 32  # a shell pipeline, a few workers and their threads


def host_reserve(pid_max: int) -> int:
    """Process ids the host keeps for itself (the portal, its workers, sshd): an eighth, at
    least 1,024."""
    return max(1024, pid_max // 8)


def process_budget(pid_max: int) -> int:
    """Process ids a queue's local jobs may hold together."""
    return max(0, pid_max - host_reserve(pid_max))


def queue_concurrency(queue: QueuePolicy, nodes: Sequence[NodeView]) -> int | None:
    """The most jobs of `queue` that can run at once on these nodes (its pool's): its
    max_concurrency, and what the nodes hold (a node each, or a CPU each, oversubscribed)."""
    capacity = None
    if nodes:
        if queue.allocation == "whole-node":
            capacity = len(nodes)
        else:
            capacity = sum(n.cpus for n in nodes) * max(1, queue.cpu_oversubscription)
    bounds = [b for b in (queue.max_concurrency, capacity) if b]
    return min(bounds) if bounds else None


def job_processes(per_job: int, concurrency: int | None, pid_max: int) -> int:
    """The process limit of one job of a queue that runs up to `concurrency` jobs at once."""
    if not concurrency:
        return per_job
    return max(1, min(per_job, process_budget(pid_max) // concurrency))


def max_local_concurrency(pid_max: int) -> int:
    return process_budget(pid_max) // MIN_JOB_PROCESSES


def concurrency_error(max_concurrency: int | None, pid_max: int) -> str | None:
    """Why a queue on a local pool may not run this many jobs at once, or None."""
    most = max_local_concurrency(pid_max)
    if max_concurrency is None or max_concurrency <= most:
        return None
    return (
        f"at most {most} for a pool on the local backend: each job needs at least "
        f"{MIN_JOB_PROCESSES} processes, and this host has {pid_max} process ids "
        f"(kernel.pid_max), {host_reserve(pid_max)} of them kept for itself; lower it, or "
        "raise kernel.pid_max"
    )


def per_job_error(per_job: int, pid_max: int) -> str | None:
    """Why the site's per-job process limit cannot hold on this host, or None."""
    if per_job <= process_budget(pid_max):
        return None
    return (
        f"at most {process_budget(pid_max)} on this host: one job could otherwise take every "
        f"process id it has ({pid_max}, kernel.pid_max) but the {host_reserve(pid_max)} kept "
        "for itself"
    )
