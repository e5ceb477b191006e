"""Whom to preempt: the fewest, lowest-level preemptible tasks whose room a waiting task needs.

A waiting task may preempt running work only when all of these hold (docs/capacity.md):
it does not fit now; the running work is in a preemptible queue and is not training or HPC
(never preempted, whatever the queue says); it is at a strictly lower level; and freeing it
really lets the waiting task start. Victims are taken lowest level first, and among equals
the most recently started (the least work lost); then any victim the placement turns out
not to need is spared. Pure: the engine and the simulator pass what runs where.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scheduling.decisions.levels import LEVELS
from scheduling.decisions.place import free_view, place
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.spec import TaskSpec

# Whatever its queue says: training and HPC lose hours of work to a preemption.
NEVER_PREEMPTED = frozenset({"ai-training", "hpc-simulation"})


@dataclass(frozen=True, slots=True)
class Running:
    key: str
    task_type: str
    level: int
    preemptible: bool  # its queue's flag
    allocations: tuple[NodeAllocation, ...]
    started_at: float = 0.0

    @property
    def may_be_preempted(self) -> bool:
        return self.preemptible and self.task_type not in NEVER_PREEMPTED


@dataclass(frozen=True, slots=True)
class Preemption:
    victims: tuple[str, ...]
    placement: Placement
    reason: str


def whom_to_preempt(
    spec: TaskSpec,
    queue: QueuePolicy,
    level: int,
    nodes: Sequence[NodeView],
    running: Sequence[Running],
    *,
    now: float | None = None,
) -> Preemption | None:
    """The running work to stop so that `spec` (at `level`) starts now; None when it already
    fits, or when no allowed set of victims would make room."""
    if place(spec, queue, _views(nodes, running, ()), now=now) is not None:
        return None
    candidates = sorted(
        (r for r in running if r.may_be_preempted and r.level < level),
        key=lambda r: (r.level, -r.started_at, r.key),
    )
    chosen: list[Running] = []
    placement = None
    for candidate in candidates:
        chosen.append(candidate)
        placement = place(spec, queue, _views(nodes, running, chosen), now=now)
        if placement is not None:
            break
    if placement is None:
        return None
    # Spare whoever the placement does not need (an early, smaller victim may be moot).
    for victim in list(reversed(chosen[:-1])):
        rest = [c for c in chosen if c is not victim]
        spared = place(spec, queue, _views(nodes, running, rest), now=now)
        if spared is not None:
            chosen, placement = rest, spared
    names = ", ".join(c.key for c in chosen)
    lowest = LEVELS[min(c.level for c in chosen)]
    reason = (
        f"preempted {len(chosen)} {lowest}-level preemptible task(s) ({names}) to start a "
        f"{LEVELS[level]}-level task"
    )
    return Preemption(tuple(c.key for c in chosen), placement, reason)


def _views(
    nodes: Sequence[NodeView], running: Sequence[Running], freed: Sequence[Running]
) -> list[NodeView]:
    gone = {id(r) for r in freed}
    allocations = [a for r in running if id(r) not in gone for a in r.allocations]
    return [free_view(n, [a for a in allocations if a.node == n.name]) for n in nodes]
