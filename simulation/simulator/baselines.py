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
from scheduling.spec import TaskSpec
from simulation.simulator.model import SimJob
from simulation.simulator.state import WHOLE_SITE, Sim

ONE_QUEUE = QueuePolicy(name=WHOLE_SITE, pool=WHOLE_SITE, task_types=())
MADE_MAX = 100_000  # node views kept for reuse in one run (see _with)


class Room:
    """What a set of free views holds in total: a quick "cannot fit" before `place()`.

    Only a necessary condition: a job that asks more CPUs or GPUs than the views hold in all
    cannot fit; one that asks less may still not (fragmentation) - `place()` decides.
    """

    __slots__ = ("cpus", "gpus", "ratio")

    def __init__(
        self, views: Iterable[NodeView], ratio: int = 1, cpus: int = 0, gpus: int = 0
    ) -> None:
        self.ratio, self.cpus, self.gpus = ratio, cpus, gpus
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
        self.made: dict[tuple, NodeView] = {}  # see _with

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
        if sim.record_room:  # room, and nobody waiting before it
            sim.room[job.key] = (
                len(sim.waiting) == 1
                and place(job.spec, ONE_QUEUE, sim.views(WHOLE_SITE)) is not None
            )
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
        views, cpus, gpus = {}, 0, 0
        for v in sim.views(WHOLE_SITE):  # Room(views), inlined: one queue never oversubscribes
            views[v.name] = v
            if v.available:
                cpus += max(0, _free_cpus(v))
                gpus += len(v.free_gpus or ())
        room = Room((), 1, cpus, gpus)
        head = self._head()
        # The last reservation holds while nothing was freed and nothing started since.
        if (
            self.easy
            and not freed
            and self.held is not None
            and self.held[0] == head
            and self.held[3] == self.starts
        ):
            arrived: list = []
            for job in fresh:
                _push(arrived, iter((job,)), itertools.count(len(arrived)), sim.order)
            self.held = self._backfill(arrived, now, views, room, self.held)
            return
        self.blocked = False
        while head is not None:
            job = sim.waiting[head]
            placement = None
            if room.may_fit(job.spec):
                placement = _place(job.spec, views.values())
            if placement is None:
                break
            self._start(job, placement, now, views, room, {})
            head = self._head()
        if head is None:
            return
        if not self.easy:
            self.blocked = True  # FIFO: the head blocks everyone behind it
            return
        held = (head, None, None, self.starts)
        self.held = self._backfill(self._merged(room, head), now, views, room, held)

    def _backfill(self, jobs, now, views, room, held) -> tuple:
        """EASY behind a blocked head: a job starts if it fits now and ends (by its walltime)
        before the head's reservation, or fits in room the head leaves free at its start.
        `jobs`: a heap of (submit order, tie, job, the rest of its group). `held`: (head,
        its start, the room it leaves then, starts so far), the reservation computed when a
        job first fits now (most passes have none that does); returned as it then stands."""
        head, shadow, spare, _ = held
        spare_cpus = None  # the CPUs free both now and at the head's start
        sim, tie = self.sim, itertools.count(len(jobs))
        no_spare: set[tuple] = set()  # requests that fit nowhere in the room the head leaves
        while jobs:
            _, _, job, stream = heapq.heappop(jobs)
            if job.key not in sim.waiting:
                _push(jobs, stream, tie, sim.order)
                continue
            if not room.may_fit(job.spec):
                continue  # the rest of its group cannot start now either: dropped
            if shadow is None:  # the reservation only once some job may fit now
                shadow, spare = self._reservation(sim.waiting[head], views, now, room)
            self.held_until = shadow
            walltime = _walltime(job)
            ends_first = now + walltime <= shadow
            shape = _shape(job.spec)
            if not ends_first and spare_cpus is None:
                spare_cpus = sum(
                    max(0, min(views[n].free_cpus, v.free_cpus)) for n, v in spare.items()
                )
            if not ends_first and (shape in no_spare or job.spec.resources.cpus > spare_cpus):
                no_spare.add(shape)  # it would delay the head, wherever it went
                if self.shortest[shape][0] + now <= shadow:  # a shorter one of its group may:
                    short = (j for j in stream if now + _walltime(j) <= shadow)  # only those now
                    _push(jobs, short, tie, sim.order)
                continue
            placement = _place(job.spec, views.values())
            if placement is None:
                continue  # nor can the rest of its group: dropped
            _push(jobs, stream, tie, sim.order)
            if ends_first:
                self._start(job, placement, now, views, room, spare)
                continue
            # Past the head's reservation: only in what the head leaves free at its start.
            both = [_common(views[name], v, self.made) for name, v in spare.items()]
            if (extra := _place(job.spec, both)) is not None:
                self._start(job, extra, now, views, room, spare)
                spare_cpus -= job.spec.resources.cpus
            else:
                no_spare.add(shape)  # the spare room only shrinks in a pass
        return head, shadow, spare, self.starts

    def _merged(self, room: Room, head: str) -> list:
        """A heap of the waiting groups whose request fits the free room at all, each at its
        first job, in submit order (the head left out; each group a snapshot)."""
        sim, tie = self.sim, itertools.count()
        heap: list[tuple] = []
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
                spare[a.node] = _minus(spare[a.node], a, self.made)

    def _reservation(
        self, head: SimJob, views: Mapping[str, NodeView], now: float, room: Room
    ) -> tuple[float, dict[str, NodeView]]:
        """When the head can start, by the running jobs' walltimes, and what it leaves free
        then (every node's view at that time with the head placed). `room`: free now."""
        later = dict(views)
        room = Room((), room.ratio, room.cpus, room.gpus)
        cpus: dict[str, int] = {}  # what the jobs ended so far free on each node: counted,
        memory: dict[str, int] = {}  # and built into views only when the head may fit
        gpus: dict[str, set[int]] = {}
        changed: set[str] = set()
        ends = sorted(self.sim.running.values(), key=lambda o: (o.planned_end, o.key))
        for at, outcome in enumerate(ends):
            for a in outcome.allocations:
                cpus[a.node] = cpus.get(a.node, 0) + a.cpus
                memory[a.node] = memory.get(a.node, 0) + a.memory_mib
                if a.gpu_indices:
                    gpus.setdefault(a.node, set(views[a.node].free_gpus or ())).update(
                        a.gpu_indices
                    )
                changed.add(a.node)
                room.cpus += a.cpus
                room.gpus += len(a.gpu_indices)
            if at + 1 < len(ends) and ends[at + 1].planned_end == outcome.planned_end:
                continue  # the others ending at the same moment free their room too
            if not room.may_fit(head.spec):
                continue
            for n in changed:
                v = views[n]
                free_gpus = tuple(sorted(gpus[n])) if n in gpus else _free_gpus(v)
                later[n] = _with(
                    v, _free_cpus(v) + cpus[n], _free_memory(v) + memory[n], free_gpus, self.made
                )
            changed.clear()
            placement = _place(head.spec, later.values())
            if placement is not None:
                for a in placement.allocations:
                    later[a.node] = _minus(later[a.node], a, self.made)
                return max(now, outcome.planned_end), later
        return math.inf, {}


def _place(spec: TaskSpec, views: Iterable[NodeView]) -> Placement | None:
    """`place()` in the one queue, shown only the nodes with a core free: a job asking at
    least one CPU takes one on every node it uses (the one queue never oversubscribes), so
    the answer is the same, and a full site has few such nodes."""
    if spec.resources.cpus < 1:
        return place(spec, ONE_QUEUE, list(views))
    return place(spec, ONE_QUEUE, [v for v in views if _free_cpus(v) > 0])


def _walltime(job: SimJob) -> float:
    return job.spec.walltime_s or job.runtime


def _shape(spec: TaskSpec) -> tuple:
    r = spec.resources
    return (r.cpus, r.gpus, r.memory_mib, r.nodes, r.gpu_type)


def _push(heap: list, stream, tie, order: dict[str, int]) -> None:
    job = next(stream, None)
    if job is not None:
        heapq.heappush(heap, (order[job.key], next(tie), job, stream))


def _minus(view: NodeView, a: NodeAllocation, made: dict | None = None) -> NodeView:
    gpus = view.free_gpus or ()
    if a.gpu_indices:
        gpus = tuple(i for i in gpus if i not in a.gpu_indices)
    return _with(view, _free_cpus(view) - a.cpus, _free_memory(view) - a.memory_mib, gpus, made)


def _common(now: NodeView, later: NodeView, made: dict | None = None) -> NodeView:
    """Room free both now and at the head's start: what a job may take without delaying it."""
    gpus = tuple(i for i in now.free_gpus or () if i in set(later.free_gpus or ()))
    return _with(
        now,
        min(_free_cpus(now), _free_cpus(later)),
        min(_free_memory(now), _free_memory(later)),
        gpus,
        made,
    )


# The simulator's views always carry their free room; None would mean all of it (NodeView).
def _free_cpus(view: NodeView) -> int:
    return view.cpus if view.free_cpus is None else view.free_cpus


def _free_memory(view: NodeView) -> int:
    return view.memory_mib if view.free_memory_mib is None else view.free_memory_mib


def _free_gpus(view: NodeView) -> tuple[int, ...]:
    return tuple(range(view.gpus)) if view.free_gpus is None else view.free_gpus


def _with(
    view: NodeView, cpus: int, memory: int, gpus: tuple[int, ...], made: dict | None = None
) -> NodeView:
    """`view` with other free room. `made`: views built before in this run, by what differs
    between them (a node's capacity, model and switch stay; building one costs ~3 µs, and a
    pass builds one per node)."""
    key = (view.name, view.available, view.available_until, cpus, memory, gpus)
    if made is not None and (hit := made.get(key)) is not None:
        return hit
    built = NodeView(
        view.name,
        view.cpus,
        view.memory_mib,
        view.gpus,
        cpus,
        memory,
        gpus,
        view.gpu_model,
        view.switch,
        view.available,
        view.available_until,
    )
    if made is not None:
        if len(made) > MADE_MAX:
            made.clear()
        made[key] = built
    return built
