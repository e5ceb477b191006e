"""When could a waiting task start? A small replay of the pool from now on.

Running work ends at its start plus its walltime; the tasks ahead of this one, in the queue's
order, start as soon as each fits (the scheduling pass backfills) and not before their quota
lets them in (`not_before`, estimate_quota.py); this task starts at the first such moment it
fits too. An upper bound, never a promise: work usually ends before its walltime. Unknown
when any of that depends on work without a walltime. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduling.decisions.place import free_view, place
from scheduling.decisions.reserve import Busy
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.spec import TaskSpec

_MAX_STEPS = 2_000
__all__ = ["Ahead", "Busy", "estimate_start"]


@dataclass(frozen=True, slots=True)
class Ahead:
    spec: TaskSpec
    queue: QueuePolicy
    not_before: float = 0.0  # epoch seconds its quota lets it in (0: it holds none)


def estimate_start(
    spec: TaskSpec,
    queue: QueuePolicy,
    nodes: Sequence[NodeView],
    busy: Sequence[Busy],
    ahead: Sequence[Ahead],
    now: float,
    *,
    not_before: float = 0.0,
) -> float | None:
    """Epoch seconds at which `spec` could start, or None when that cannot be known.

    `not_before`: the earliest moment its quota lets it in; the pool is replayed from `now`
    all the same, so what starts before then and what ends by then shape the pool it meets.
    """
    live = list(busy)
    waiting = [*ahead, Ahead(spec, queue, not_before)]
    me = len(waiting) - 1
    t = now
    for _ in range(_MAX_STEPS):
        started: list[int] = []
        for i, job in enumerate(waiting):
            if job.not_before > t:
                continue
            views = [
                free_view(n, [b.allocation for b in live if b.allocation.node == n.name])
                for n in nodes
            ]
            placement = place(job.spec, job.queue, views, now=t)
            if placement is None:
                continue
            if i == me:
                return t
            walltime = job.spec.walltime_s
            ends = t + walltime if walltime else None
            live.extend(Busy(a, ends) for a in placement.allocations)
            started.append(i)
        me -= len(started)
        waiting = [job for i, job in enumerate(waiting) if i not in started]
        upcoming = [b.ends_at for b in live if b.ends_at is not None and b.ends_at > t]
        upcoming += [job.not_before for job in waiting if job.not_before > t]
        if not upcoming:
            return None  # nothing will end that we know of: it waits on the unknown
        t = min(upcoming)
        live = [b for b in live if b.ends_at is None or b.ends_at > t]
    return None
