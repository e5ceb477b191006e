"""The baselines a site is compared with: one undifferentiated queue over the whole site, in
submit order (FIFO), and the same queue with EASY backfill. Placement is the site's own
`place()` with one packed queue; no levels, quotas, preemption or leases."""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Iterable, Mapping

from scheduling.decisions.place import place, usable_cpus
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.simulation.model import SimJob
from scheduling.simulation.state import WHOLE_SITE, Sim
from scheduling.spec import TaskSpec

ONE_QUEUE = QueuePolicy(name=WHOLE_SITE, pool=WHOLE_SITE, task_types=())


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
        self.head = 0
        # The waiting jobs by request, each group in submit order (see _merged), the jobs
        # that arrived since the last pass, and EASY's reservation then: (head, time, room).
        self.groups: dict[tuple, dict[str, SimJob]] = {}
        self.unsorted: set[tuple] = set()
        self.shortest: dict[tuple, list[float]] = {}  # each group's walltimes, sorted
        self.fresh: list[SimJob] = []
        self.held: tuple | None = None
        self.started: list[SimJob] = []
        self.starts = 0  # jobs started so far (a reservation is kept only while it holds)
        self.held_until = math.inf  # the reservation _backfill works to

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
        self._group(job)
        self.fresh.append(job)
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
        keys = {k for k in self.queue if k in sim.waiting} | {job.key}
        self.queue = sorted(keys, key=sim.order.__getitem__)
        self.head = 0
        self._group(job)
        self.fresh.append(job)

    def event(self, kind: int, key: str, now: float) -> None:
        pass

    def schedule(self, now: float) -> None:
        try:
            self._schedule(now)
        finally:
            self._leave()

    def _schedule(self, now: float) -> None:
        """FIFO: start from the head while it fits. EASY: then reserve the head's start and
        backfill behind it. Waiting jobs are kept by request (`_shape`) in submit order, and
        the backfill merges those groups in submit order, skipping a whole group once one of
        its jobs does not fit now. Without room freed since the last pass, only the jobs that
        arrived since are tried against the same reservation."""
        sim = self.sim
        sim.dirty.clear()
        fresh, self.fresh = self.fresh, []
        freed = WHOLE_SITE in sim.freed
        sim.freed.discard(WHOLE_SITE)
        if not sim.waiting:
            return
        views = {v.name: v for v in sim.views(WHOLE_SITE)}
        room = Room(views.values())
        head = self._head()
        # The last reservation holds while nothing was freed and nothing started since.
        if self.easy and not freed and self.held is not None and self.held[0] == head \
                and self.held[3] == self.starts:  # fmt: skip
            _, shadow, spare, _ = self.held
            arrived: list = []
            for job in fresh:
                _push(arrived, iter((job,)), itertools.count(len(arrived)), sim.order)
            self._backfill(arrived, now, views, room, shadow, spare)
            return
        self.blocked = False
        while head is not None:
            job = sim.waiting[head]
            placement = None
            if room.may_fit(job.spec):
                placement = place(job.spec, ONE_QUEUE, list(views.values()))
            if placement is None:
                break
            self._start(job, placement, now, views, room, {})
            head = self._head()
        if head is None:
            return
        if not self.easy:
            self.blocked = True  # FIFO: the head blocks everyone behind it
            return
        shadow, spare = self._reservation(sim.waiting[head], views, now)
        self._backfill(self._merged(room, head), now, views, room, shadow, spare)
        self.held = (head, shadow, spare, self.starts)

    def _backfill(self, jobs, now, views, room, shadow, spare) -> None:
        """EASY behind a blocked head: a job starts if it fits now and ends (by its walltime)
        before the head's reservation, or fits in room the head leaves free at its start.
        `jobs`: a heap of (submit order, tie, job, the rest of its group)."""
        spare_cpus = sum(max(0, min(views[n].free_cpus, v.free_cpus)) for n, v in spare.items())
        sim, tie = self.sim, itertools.count(len(jobs))
        self.held_until = shadow
        no_spare: set[tuple] = set()  # requests that fit nowhere in the room the head leaves
        while jobs:
            _, _, job, stream = heapq.heappop(jobs)
            if job.key not in sim.waiting:
                _push(jobs, stream, tie, sim.order)
                continue
            if not room.may_fit(job.spec):
                continue  # the rest of its group cannot start now either: dropped
            walltime = _walltime(job)
            ends_first = now + walltime <= shadow
            shape = _shape(job.spec)
            if not ends_first and (shape in no_spare or job.spec.resources.cpus > spare_cpus):
                no_spare.add(shape)  # it would delay the head, wherever it went
                if self.shortest[shape][0] + now <= shadow:  # a shorter one of its group may not
                    _push(jobs, stream, tie, sim.order)
                continue
            placement = place(job.spec, ONE_QUEUE, list(views.values()))
            if placement is None:
                continue  # nor can the rest of its group: dropped
            _push(jobs, stream, tie, sim.order)
            if ends_first:
                self._start(job, placement, now, views, room, spare)
                continue
            # Past the head's reservation: only in what the head leaves free at its start.
            both = [_common(views[name], v) for name, v in spare.items()]
            if (extra := place(job.spec, ONE_QUEUE, both)) is not None:
                self._start(job, extra, now, views, room, spare)
                spare_cpus -= job.spec.resources.cpus
            else:
                no_spare.add(shape)  # the spare room only shrinks in a pass

    def _merged(self, room: Room, head: str) -> list:
        """A heap of the waiting groups whose request fits the free room at all, each at its
        first job, in submit order (the head left out; each group a snapshot)."""
        sim, heap, tie = self.sim, [], itertools.count()
        for shape, members in list(self.groups.items()):
            if shape[0] > room.cpus or shape[1] > room.gpus:
                continue
            self._sort(shape)
            # Not a copy: started jobs leave their group only after the pass (`_leave`).
            _push(heap, (j for j in members.values() if j.key != head), tie, sim.order)
        return heap

    def _head(self) -> str | None:
        """The first waiting job in submit order."""
        waiting, queue = self.sim.waiting, self.queue
        while self.head < len(queue) and queue[self.head] not in waiting:
            self.head += 1
        if self.head > 4096 and self.head > len(queue) // 2:
            del queue[: self.head]
            self.head = 0
        if len(queue) > 8192 and len(queue) > 2 * len(waiting):  # backfilled from the middle
            self.queue = queue = [k for k in queue[self.head :] if k in waiting]
            self.head = 0
        return queue[self.head] if self.head < len(queue) else None

    def _group(self, job: SimJob) -> None:
        bisect.insort(self.shortest.setdefault(_shape(job.spec), []), _walltime(job))
        members = self.groups.setdefault(_shape(job.spec), {})
        if members and self.sim.order[next(reversed(members))] > self.sim.order[job.key]:
            self.unsorted.add(_shape(job.spec))  # requeued: back to its place by submit order
        members[job.key] = job

    def _sort(self, shape: tuple) -> None:
        if shape in self.unsorted:
            self.unsorted.discard(shape)
            members = self.groups[shape]
            ordered = sorted(members.values(), key=lambda j: self.sim.order[j.key])
            members.clear()
            members.update((j.key, j) for j in ordered)

    def _leave(self) -> None:
        """Take the jobs started in this pass out of their groups."""
        for job in self.started:
            shape = _shape(job.spec)
            members = self.groups[shape]
            del members[job.key]
            walltimes = self.shortest[shape]
            del walltimes[bisect.bisect_left(walltimes, _walltime(job))]
            if not members:
                del self.groups[shape], self.shortest[shape]
        self.started.clear()

    def _start(self, job, placement, now, views, room, spare) -> None:
        self.sim.start(job, placement, now)
        self.started.append(job)
        self.starts += 1
        room.take(placement)
        # Work that ends (by its walltime) before the head's reservation leaves its room by
        # then; only work past it takes from what the head leaves.
        past = spare and now + (job.spec.walltime_s or job.runtime) > self.held_until
        for a in placement.allocations:
            views[a.node] = self.sim.view(a.node)
            if past and a.node in spare:
                spare[a.node] = _minus(spare[a.node], a)

    def _reservation(
        self, head: SimJob, views: Mapping[str, NodeView], now: float
    ) -> tuple[float, dict[str, NodeView]]:
        """When the head can start, by the running jobs' walltimes, and what it leaves free
        then (every node's view at that time with the head placed)."""
        sim = self.sim
        cpus = {n: v.free_cpus for n, v in views.items()}
        memory = {n: v.free_memory_mib for n, v in views.items()}
        gpus: dict[str, set[int]] = {}
        room = Room(views.values())
        for outcome in sorted(sim.running.values(), key=lambda o: (o.planned_end, o.key)):
            for a in outcome.allocations:  # counted, not built: most steps place nothing
                cpus[a.node] += a.cpus
                memory[a.node] += a.memory_mib
                gpus.setdefault(a.node, set(views[a.node].free_gpus or ())).update(a.gpu_indices)
                room.cpus += a.cpus
                room.gpus += len(a.gpu_indices)
            if not room.may_fit(head.spec):
                continue
            later = {
                n: v if cpus[n] == v.free_cpus and n not in gpus
                else _with(v, cpus[n], memory[n], tuple(sorted(gpus.get(n, v.free_gpus or ()))))
                for n, v in views.items()
            }  # fmt: skip
            placement = place(head.spec, ONE_QUEUE, list(later.values()))
            if placement is not None:
                for a in placement.allocations:
                    later[a.node] = _minus(later[a.node], a)
                return max(now, outcome.planned_end), later
        return math.inf, {}


def _walltime(job: SimJob) -> float:
    return job.spec.walltime_s or job.runtime


def _shape(spec: TaskSpec) -> tuple:
    r = spec.resources
    return (r.cpus, r.gpus, r.memory_mib, r.nodes, r.gpu_type)


def _push(heap: list, stream, tie, order: dict[str, int]) -> None:
    job = next(stream, None)
    if job is not None:
        heapq.heappush(heap, (order[job.key], next(tie), job, stream))


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
