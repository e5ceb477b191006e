"""When could a waiting task start? A small replay of the pool from now on.

Running work ends at its start plus its walltime; the tasks ahead of this one, in the queue's
order, start as soon as each fits (the scheduling pass backfills) and not before their quota
lets them in (`not_before`, estimate_quota.py); this task starts at the first such moment it
fits too. An upper bound, never a promise: work usually ends before its walltime. Unknown
when any of that depends on work without a walltime. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from scheduling.decisions.place import free_view, place
from scheduling.decisions.reserve import Busy
from scheduling.decisions.types import NodeAllocation, NodeView, QueuePolicy
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
        # The free view changes only when a job starts: built once per step, and each start
        # takes its allocations off the nodes it lands on (a queue of thousands is tried at
        # every step; rebuilding every node for every job tried took seconds).
        views = _views(nodes, live)
        where = {view.name: i for i, view in enumerate(views)}
        for i, job in enumerate(waiting):
            if job.not_before > t:
                continue
            placement = place(job.spec, job.queue, views, now=t)
            if placement is None:
                continue
            if i == me:
                return t
            walltime = job.spec.walltime_s
            ends = t + walltime if walltime else None
            live.extend(Busy(a, ends) for a in placement.allocations)
            for a in placement.allocations:
                views[where[a.node]] = _take(views[where[a.node]], a)
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


def _views(nodes: Sequence[NodeView], live: Sequence[Busy]) -> list[NodeView]:
    """Each node with what the live allocations leave free on it."""
    on: dict[str, list[NodeAllocation]] = {}
    for busy in live:
        on.setdefault(busy.allocation.node, []).append(busy.allocation)
    return [free_view(n, on.get(n.name, ())) for n in nodes]


def _take(view: NodeView, allocation: NodeAllocation) -> NodeView:
    """`view` with `allocation` placed on it (as `free_view` counts it)."""
    return dataclasses.replace(
        view,
        free_cpus=(view.free_cpus or 0) - allocation.cpus,
        free_memory_mib=(view.free_memory_mib or 0) - allocation.memory_mib,
        free_gpus=tuple(g for g in view.free_gpus or () if g not in allocation.gpu_indices),
    )
