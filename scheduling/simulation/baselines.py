"""The baselines a site is compared with: one undifferentiated queue over the whole site, in
submit order (FIFO), and the same queue with EASY backfill. Placement is the site's own
`place()` with one packed queue; no levels, quotas, preemption or leases."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from scheduling.decisions.place import place, usable_cpus
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.simulation.model import SimJob
from scheduling.simulation.state import WHOLE_SITE, Sim
from scheduling.spec import TaskSpec

ONE_QUEUE = QueuePolicy(name=WHOLE_SITE, pool=WHOLE_SITE, task_types=())
# How many waiting jobs EASY looks at past the head in one pass, as Slurm's backfill does
# (bf_max_job_test, 500 by default there); the rest wait for a later pass.
BACKFILL_DEPTH = 1000


class Room:
    """What a set of free views holds in total: a quick "cannot fit" before `place()`.

    Only a necessary condition: a job that asks more CPUs or GPUs than the views hold in all
    cannot fit; one that asks less may still not (fragmentation) - `place()` decides.
    """

    __slots__ = ("cpus", "gpus", "ratio")

    def __init__(self, views: Iterable[NodeView], ratio: int = 1) -> None:
        self.ratio = ratio
        self.cpus = self.gpus = 0
        for v in views:
            if v.available:
                self.cpus += max(0, usable_cpus(v, ratio))
                self.gpus += len(v.free_gpus or ())

    def may_fit(self, spec: TaskSpec) -> bool:
        return spec.resources.cpus <= self.cpus and spec.resources.gpus <= self.gpus

    def take(self, placement: Placement) -> None:
        for a in placement.allocations:
            self.cpus -= a.cpus
            self.gpus -= len(a.gpu_indices)


class Baseline:
    def __init__(self, sim: Sim, *, easy: bool) -> None:
        self.sim, self.easy = sim, easy
        for name in sim.nodes:
            sim.move(name, WHOLE_SITE)
        # FIFO: after a pass that ended on a blocked head, an arrival (behind it) starts
        # nothing; only room freed can.
        self.blocked = False
        self._fits_empty: dict[tuple, bool] = {}
        # The one queue, in submit order: keys, and where the first still waiting may be.
        # Started keys stay until the list is compacted; `sim.waiting` says who still waits.
        self.queue: list[str] = []
        self.head = self.dead = 0

    def arrive(self, job: SimJob, now: float) -> None:
        sim = self.sim
        key = _shape(job.spec)
        if key not in self._fits_empty:
            idle = [n for n in sim.site.nodes]
            self._fits_empty[key] = place(job.spec, ONE_QUEUE, idle) is not None
        if not self._fits_empty[key]:
            sim.refuse(job.key, "no node set of the whole site can ever hold it")
            return
        sim.enqueue(job, now)
        self.queue.append(job.key)  # arrivals come in submit order
        if sim.record_room:
            sim.room[job.key] = place(job.spec, ONE_QUEUE, sim.views(WHOLE_SITE)) is not None
        if self.easy or not self.blocked:
            sim.dirty.add(WHOLE_SITE)

    def ended(self, job: SimJob, now: float) -> None:
        pass

    def requeued(self, job: SimJob, now: float, why: str) -> None:
        sim = self.sim
        sim.enqueue(job, now)
        # It keeps its place in the one queue: submit order.
        self.queue = sorted((k for k in self.queue if k in sim.waiting), key=sim.order.__getitem__)
        self.head = 0

    def event(self, kind: int, key: str, now: float) -> None:
        pass

    def schedule(self, now: float) -> None:
        sim = self.sim
        sim.dirty.clear()
        self.blocked = False
        if not sim.waiting:
            return
        views = {v.name: v for v in sim.views(WHOLE_SITE)}
        room = Room(views.values())
        shadow, spare, spare_cpus = None, {}, 0
        for job in self._waiting():
            if shadow is not None and room.cpus <= 0 and room.gpus <= 0:
                break  # nothing left to backfill into
            placement = None
            if room.may_fit(job.spec):
                placement = place(job.spec, ONE_QUEUE, list(views.values()))
            if shadow is None:
                if placement is not None:
                    self._start(job, placement, now, views, room, spare)
                    continue
                if not self.easy:
                    self.blocked = True
                    return  # FIFO: the head blocks everyone behind it
                shadow, spare = self._reservation(job, views, now)
                # At most what is free both now and then (now only shrinks in this pass).
                spare_cpus = sum(
                    max(0, min(views[n].free_cpus, v.free_cpus)) for n, v in spare.items()
                )
                continue
            if placement is None:
                continue
            walltime = job.spec.walltime_s or job.runtime
            if now + walltime <= shadow:
                self._start(job, placement, now, views, room, spare)
                continue
            # Past the head's reservation: only in what the head leaves free at its start.
            if job.spec.resources.cpus > spare_cpus:
                continue
            both = [_common(views[name], v) for name, v in spare.items()]
            if (extra := place(job.spec, ONE_QUEUE, both)) is not None:
                self._start(job, extra, now, views, room, spare)

    def _waiting(self):
        """The waiting jobs in submit order, at most `BACKFILL_DEPTH` of them past the head."""
        waiting, queue = self.sim.waiting, self.queue
        while self.head < len(queue) and queue[self.head] not in waiting:
            self.head += 1
        if self.dead > 4096:  # jobs backfilled from the middle: drop them from the list
            self.queue = queue = [k for k in queue[self.head :] if k in waiting]
            self.head = self.dead = 0
        taken = 0
        for i in range(self.head, len(queue)):
            key = queue[i]
            if key not in waiting:
                self.dead += 1
                continue
            yield waiting[key]
            taken += 1
            if taken > BACKFILL_DEPTH:
                return

    def _start(self, job, placement, now, views, room, spare) -> None:
        self.sim.start(job, placement, now)
        room.take(placement)
        for a in placement.allocations:
            views[a.node] = self.sim.view(a.node)
            if a.node in spare:
                spare[a.node] = _minus(spare[a.node], a)

    def _reservation(
        self, head: SimJob, views: Mapping[str, NodeView], now: float
    ) -> tuple[float, dict[str, NodeView]]:
        """When the head can start, by the running jobs' walltimes, and what it leaves free
        then (every node's view at that time with the head placed)."""
        sim = self.sim
        later = dict(views)
        room = Room(later.values())
        for outcome in sorted(sim.running.values(), key=lambda o: (o.planned_end, o.key)):
            for a in outcome.allocations:
                later[a.node] = _plus(later[a.node], a)
                room.cpus += a.cpus
                room.gpus += len(a.gpu_indices)
            if not room.may_fit(head.spec):
                continue
            placement = place(head.spec, ONE_QUEUE, list(later.values()))
            if placement is not None:
                for a in placement.allocations:
                    later[a.node] = _minus(later[a.node], a)
                return max(now, outcome.planned_end), later
        return math.inf, {}


def _shape(spec: TaskSpec) -> tuple:
    r = spec.resources
    return (r.cpus, r.gpus, r.memory_mib, r.nodes, r.gpu_type)


def _plus(view: NodeView, a: NodeAllocation) -> NodeView:
    gpus = tuple(sorted(set(view.free_gpus or ()) | set(a.gpu_indices)))
    return _with(view, view.free_cpus + a.cpus, view.free_memory_mib + a.memory_mib, gpus)


def _minus(view: NodeView, a: NodeAllocation) -> NodeView:
    gpus = tuple(i for i in view.free_gpus or () if i not in a.gpu_indices)
    return _with(view, view.free_cpus - a.cpus, view.free_memory_mib - a.memory_mib, gpus)


def _common(now: NodeView, later: NodeView) -> NodeView:
    """Room free both now and at the head's start: what a job may take without delaying it."""
    gpus = tuple(i for i in now.free_gpus or () if i in set(later.free_gpus or ()))
    return _with(now, min(now.free_cpus, later.free_cpus),
                 min(now.free_memory_mib, later.free_memory_mib), gpus)  # fmt: skip


def _with(view: NodeView, cpus: int, memory: int, gpus: tuple[int, ...]) -> NodeView:
    return NodeView(view.name, view.cpus, view.memory_mib, view.gpus, cpus, memory, gpus,
                    view.gpu_model, view.switch, view.available, view.available_until)  # fmt: skip
