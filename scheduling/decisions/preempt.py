"""Whom to preempt: the fewest, lowest-level preemptible tasks whose room a waiting task needs.

A waiting task may preempt running work only when all of these hold (docs/capacity.md):
it does not fit now; the running work is in a preemptible queue and is not training or HPC
(never preempted, whatever the queue says); it is at a strictly lower level; and freeing it
really lets the waiting task start. Victims are taken lowest level first, and among equals
the most recently started (the least work lost); then any victim the placement turns out
not to need is spared.

Borrowed room is reclaimed the same way: a task of a project within its nominal quota
(`reclaim`: that queue) may also preempt, at any level, work that runs on room its project
borrowed there (`Running.borrowed`), borrowed work first; only where that work's queue is
preemptible. Pure: the engine and the simulator pass what runs where.
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
    borrowed: str = ""  # the queue in which it runs on other projects' unused quota

    @property
    def may_be_preempted(self) -> bool:
        return self.preemptible and self.task_type not in NEVER_PREEMPTED

    def yields_to(self, level: int, *, reclaim: str | None) -> bool:
        """Whether a task at `level` may take its room: a lower level's, or work borrowed in
        `reclaim`, the queue where the task's project is within its nominal quota."""
        return self.may_be_preempted and (self.level < level or self._reclaimed(reclaim))

    def _reclaimed(self, queue: str | None) -> bool:
        return bool(self.borrowed) and self.borrowed == queue


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
    reclaim: str | None = None,
) -> Preemption | None:
    """The running work to stop so that `spec` (at `level`) starts now; None when it already
    fits, or when no allowed set of victims would make room. `reclaim`: the queue where the
    task's project is within its nominal quota; work borrowed there yields to it whatever
    its level."""
    room = _Room(nodes, running)
    if place(spec, queue, room.views(), now=now) is not None:
        return None
    useful = _useful_nodes(spec, nodes)
    candidates = sorted(
        (
            r
            for r in running
            if r.yields_to(level, reclaim=reclaim) and any(a.node in useful for a in r.allocations)
        ),
        key=lambda r: (not r._reclaimed(reclaim), r.level, -r.started_at, r.key),
    )
    chosen: list[Running] = []
    placement = None
    for candidate in candidates:
        chosen.append(candidate)
        room.free(candidate)
        placement = place(spec, queue, room.views(), now=now)
        if placement is not None:
            break
    if placement is None:
        return None
    # Spare whoever the placement does not need (an early, smaller victim may be moot).
    for victim in list(reversed(chosen[:-1])):
        room.hold(victim)
        spared = place(spec, queue, room.views(), now=now)
        if spared is None:
            room.free(victim)
        else:
            chosen.remove(victim)
            placement = spared
    names = ", ".join(c.key for c in chosen)
    if all(c._reclaimed(reclaim) for c in chosen):
        reason = (
            f"preempted {len(chosen)} task(s) on borrowed quota ({names}) to give a lender "
            f"its own quota back"
        )
    else:
        lowest = LEVELS[min(c.level for c in chosen)]
        reason = (
            f"preempted {len(chosen)} {lowest}-level preemptible task(s) ({names}) to start a "
            f"{LEVELS[level]}-level task"
        )
    return Preemption(tuple(c.key for c in chosen), placement, reason)


def _useful_nodes(spec: TaskSpec, nodes: Sequence[NodeView]) -> set[str]:
    """Nodes where freeing room could matter: GPU work only ever runs on GPU nodes (of its
    model). A victim elsewhere is never worth stopping."""
    res = spec.resources
    return {
        n.name
        for n in nodes
        if n.available
        and (res.gpus == 0 or n.gpus > 0)
        and (res.gpu_type is None or n.gpu_model == res.gpu_type)
    }


class _Room:
    """The nodes' free views with some running work freed; kept up to date per node, so
    trying one more victim costs its own nodes, not the whole pool."""

    def __init__(self, nodes: Sequence[NodeView], running: Sequence[Running]) -> None:
        self._nodes = {n.name: n for n in nodes}
        self._held: dict[str, dict[str, NodeAllocation]] = {name: {} for name in self._nodes}
        for r in running:
            for i, a in enumerate(r.allocations):
                if a.node in self._held:
                    self._held[a.node][f"{r.key}#{i}"] = a
        self._views = {name: self._view(name) for name in self._nodes}

    def views(self) -> list[NodeView]:
        return list(self._views.values())

    def free(self, r: Running) -> None:
        for i, a in enumerate(r.allocations):
            if a.node in self._held:
                self._held[a.node].pop(f"{r.key}#{i}", None)
                self._views[a.node] = self._view(a.node)

    def hold(self, r: Running) -> None:
        for i, a in enumerate(r.allocations):
            if a.node in self._held:
                self._held[a.node][f"{r.key}#{i}"] = a
                self._views[a.node] = self._view(a.node)

    def _view(self, name: str) -> NodeView:
        return free_view(self._nodes[name], self._held[name].values())
