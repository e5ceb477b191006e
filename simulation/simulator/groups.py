"""The waiting jobs of the site policy in the simulator, and each pool's reservations.

Waiting jobs are kept per pool in groups of the same request (`shape`) and the same place
in the order (`rank`: level, type, project), each group in submit order, with its planned
runtimes sorted: a pass offers a group's jobs in turn and stops at the first that cannot
start. `SitePolicy` (switchyard.py) keeps the books; this half files the jobs, makes each
pool's plan, and offers the jobs behind its reservations shortest first.

Two orders are kept as jobs come and go, so that a pass touches only the groups it reaches:
each queue and rank's groups by their first job (`firsts`: a pass over every job in the
order of value then submit order opens a group only when its first job comes up), and each
queue's shapes by the CPUs they ask (`needs`: behind the reservations only shapes the room
can hold are looked at).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import math
from collections import defaultdict

from scheduling.decisions.order import OVERDUE, priority_value, weight_at
from scheduling.decisions.place import cpu_ratio, free_view, place
from scheduling.decisions.reserve import RESERVED_JOBS, Busy, Plan
from scheduling.decisions.schedule import Fail, PoolRoom, Start, WaitingJob, schedule_pass
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.model import SimJob
from simulation.simulator.predicted import Predictions
from simulation.simulator.state import Sim


def shape_of(job: SimJob) -> tuple:
    """What a job asks: jobs of one shape fit, or not, alike (on nodes not lent: there the
    walltime matters too, see `_pass`)."""
    r = job.spec.resources
    return (job.queue, r.cpus, r.gpus, r.memory_mib, r.nodes, r.gpu_type)


def push(heads: list, stream: tuple, tie: itertools.count, seq: dict[str, int]) -> None:
    """The stream's next job onto the heap, in schedule_pass's order (priority, then seq)."""
    job = next(stream[3], None)
    if job is not None:
        heapq.heappush(heads, (-stream[2], seq[job.key], next(tie), job, stream))


class Groups(Predictions):
    """The filing half of `SitePolicy` (planned runtimes: `Predictions`)."""

    sim: Sim
    pool_of_queue: dict[str, str]
    level: dict[str, int]
    overdue: set[str]  # SitePolicy's: waiting past their queue's bound
    seq: dict[str, int]
    groups: dict[str, dict[tuple, dict[tuple, dict[str, SimJob]]]]
    where: dict[str, tuple[str, tuple, tuple]]
    unsorted: set[tuple]
    shortest: dict[tuple, list[tuple[float, int, str]]]
    plans: dict[str, Plan]
    since: dict[str, set[str]]
    # Per pool, per queue and rank, its groups by their first job's submit order: (seq,
    # shape), sorted; and each group's first seq.
    firsts: dict[str, dict[tuple, list[tuple[int, tuple]]]]
    first_seq: dict[tuple, int]
    # Per pool, per queue, the shapes its jobs wait with by the CPUs they ask: (CPUs, number,
    # shape), sorted (`shape_number` numbers them); the pool's shapes that fit not even its
    # nodes emptied, with those nodes.
    needs: dict[str, dict[str, list[tuple[int, int, tuple]]]]
    shape_number: dict[tuple, int]
    _unfit: dict[str, tuple[tuple, set[tuple]]]
    tie: itertools.count
    # Per running job, its room held on a pool's nodes as `Busy` rows, by its planned end,
    # allocations and those nodes (made again only when one changes); dropped when it stops.
    _held: dict[str, tuple[float, tuple, tuple, list[Busy]]]
    _ever: dict[str, tuple]

    def _filing(self) -> None:
        # The waiting jobs per pool: by request (`shape_of`), then by rank in the order
        # (level, type, project, borrowed), each group in submit order (`seq`); where each
        # job is kept; the groups a level change left out of submit order.
        self.groups = defaultdict(dict)
        self.where = {}
        self.unsorted = set()
        self._ever = {}  # pool → (its nodes, emptied, shape → never fits)
        # Each pool's reservations, kept from pass to pass until room is freed there, and the
        # jobs started since the plan was made (it counts them already).
        self.plans = {}
        self.since = {}
        # Each group's planned runtimes, sorted: whether any of it may end before a time.
        self.shortest = defaultdict(list)
        self._held = {}
        self.firsts = defaultdict(dict)
        self.first_seq = {}
        self.tie = itertools.count()
        self.needs = defaultdict(dict)
        self.shape_number = {}
        self._unfit = {}
        self._lent_of: tuple[tuple | None, bool] = (None, False)

    def _start(self, job: SimJob, placement, now: float) -> None: ...  # SitePolicy's

    def _release(self, job: SimJob, now: float) -> None: ...  # SitePolicy's

    def _borrows(self, job: SimJob) -> bool:  # SitePolicy's: admitted on borrowed room
        raise NotImplementedError

    def _value(self, queue: str, rank: tuple, minute: int, shares: dict[str, float]) -> int:
        """The start-order number of a group of `queue` (rank: level, type, project, borrowed),
        at the site's `minute` of the day, with the queue's fair-share factors `shares`."""
        return priority_value(
            level=rank[0],
            weight=weight_at(self.sim.site.weights.get(queue, ()), rank[1], minute),
            share=shares.get(rank[2], 1.0),
            borrowed=rank[3],
        )

    def _runtime_key(self, job: SimJob) -> tuple[float, int, str]:
        """Where the job stands in its group by planned runtime (ties: submit order)."""
        return (self._planned(job), self.seq[job.key], job.key)

    def _plan(self, pool: str, nodes: tuple, now: float, *, fresh: bool) -> Plan:
        """The pool's reservations: made anew from the running work's planned ends when room
        was freed there since the last pass (`fresh` False: every waiting job is offered),
        else last pass's, against which only new arrivals are offered."""
        plan = self.plans.get(pool)
        if plan is None or not fresh:
            since: set[str] = set()
            names = {n.name for n in nodes}
            running = self.sim.running

            held = self._held

            def busy() -> list[Busy]:
                out: list[Busy] = []
                for key, o in running.items():
                    if key not in since:
                        kept = held.get(key)
                        if (
                            kept is None
                            or kept[0] != o.planned_end
                            or kept[1] is not o.allocations
                            or kept[2] is not nodes
                        ):
                            rows = [
                                Busy(a, o.planned_end) for a in o.allocations if a.node in names
                            ]
                            kept = held[key] = (o.planned_end, o.allocations, nodes, rows)
                        out += kept[3]
                return out

            # A reservation the last plan made stays where nothing that decided it changed
            # (jobs that ended as planned, or started beside it): it is not made again.
            kept = plan.kept() if plan is not None else {}
            plan = self.plans[pool] = Plan(nodes, busy, now=now, drained=self.sim.down, made=kept)
            self.since[pool] = since
        plan.now = now
        plan.passed.clear()
        plan.blocked.clear()
        plan.whole_pass = not fresh  # else only new arrivals are offered
        # Each task past its bound takes one more (schedule_pass: every one keeps its own).
        late = sum(1 for key in self.overdue if self.where.get(key, ("",))[0] == pool)
        plan.reserve = RESERVED_JOBS + late
        return plan

    def _never(self, pool: str, nodes: tuple):
        """Whether a request can never fit the pool as it is now (a lease may shrink it): as
        schedule_pass judges it, on its nodes emptied and up; kept until the nodes change."""
        cached = self._ever.get(pool)
        if cached is None or cached[0] is not nodes:
            emptied = [
                free_view(dataclasses.replace(n, available=True, available_until=None), ())
                for n in nodes
            ]
            cached = self._ever[pool] = (nodes, emptied, {})
        _, emptied, known = cached

        def never(shape: tuple, queue) -> bool:
            if shape not in known:
                spec = TaskSpec(
                    name="shape",
                    project="",
                    resources=Resources(
                        cpus=shape[1],
                        gpus=shape[2],
                        memory_mib=shape[3],
                        nodes=shape[4],
                        gpu_type=shape[5],
                    ),
                )
                known[shape] = place(spec, queue, emptied) is None
            return known[shape]

        return never

    def _lent(self, nodes: tuple) -> bool:
        """Whether any of the pool's nodes is lent until a time (kept until the nodes change)."""
        if self._lent_of[0] is not nodes:
            self._lent_of = (nodes, any(n.available_until is not None for n in nodes))
        return self._lent_of[1]

    def _rank(self, job: SimJob) -> tuple:
        """Its place in the order: level (`OVERDUE` past its queue's bound), type, project,
        and whether it was admitted on borrowed room (which goes after its level's own-quota
        work)."""
        level = OVERDUE if job.key in self.overdue else self.level[job.key]
        return (level, job.type, job.project, self._borrows(job))

    def _bucket(self, job: SimJob) -> None:
        pool = self.pool_of_queue[job.queue]
        shape, rank = shape_of(job), self._rank(job)
        if shape not in self.groups[pool]:
            self._need(pool, shape, add=True)
        members = self.groups[pool].setdefault(shape, {}).setdefault(rank, {})
        seq = self.seq[job.key]
        if members and self.seq[next(reversed(members))] > seq:
            self.unsorted.add((pool, shape, rank))  # moved here by a level change
        members[job.key] = job
        self.where[job.key] = (pool, shape, rank)
        bisect.insort(self.shortest[(pool, shape, rank)], self._runtime_key(job))
        first = self.first_seq.get((pool, shape, rank))
        if first is None or seq < first:
            self._first_is(pool, shape, rank, first, seq)

    def _unbucket(self, job: SimJob) -> None:
        pool, shape, rank = self.where.pop(job.key)
        planned = self.shortest[(pool, shape, rank)]
        del planned[bisect.bisect_left(planned, self._runtime_key(job))]
        if not planned:
            del self.shortest[(pool, shape, rank)]
        ranks = self.groups[pool][shape]
        members = ranks[rank]
        del members[job.key]
        if not members:
            del ranks[rank]
            if not ranks:
                del self.groups[pool][shape]
                self._need(pool, shape, add=False)
        seq = self.seq[job.key]
        if self.first_seq[(pool, shape, rank)] == seq:
            if not members:
                self._first_is(pool, shape, rank, seq, None)
            elif (pool, shape, rank) in self.unsorted:
                self._first_is(pool, shape, rank, seq, min(self.seq[k] for k in members))
            else:
                self._first_is(pool, shape, rank, seq, self.seq[next(iter(members))])

    def _need(self, pool: str, shape: tuple, *, add: bool) -> None:
        """File (or drop) a shape the pool's jobs wait with, by the CPUs it asks (`needs`)."""
        number = self.shape_number.setdefault(shape, len(self.shape_number))
        order = self.needs[pool].setdefault(shape[0], [])
        if add:
            bisect.insort(order, (shape[1], number, shape))  # (CPUs, number): unique
            nodes, unfit = self._unfit.get(pool) or ((), set())  # none yet: made next pass
            current = nodes is self.sim.pool_nodes(pool)
            if current and self._never(pool, nodes)(shape, self.sim.site.queues[shape[0]]):
                unfit.add(shape)
        else:
            del order[bisect.bisect_left(order, (shape[1], number))]

    def _may_fit(self, pool: str, room: PoolRoom, never) -> list[tuple]:
        """The pool's waiting shapes that may fit its room now, or fit it never (the pass
        must fail those): those asking no more CPUs than the room has for their queue,
        found by `needs`, and the shapes that fit not even the pool emptied. The rest are
        too big for the room."""
        queues, groups = self.sim.site.queues, self.groups.get(pool, {})
        nodes = self.sim.pool_nodes(pool)
        unfit = self._unfit.get(pool)
        if unfit is None or unfit[0] is not nodes:
            unfit = self._unfit[pool] = (nodes, {s for s in groups if never(s, queues[s[0]])})
        shapes: list[tuple] = []
        most: dict[str, int] = {}
        for queue, order in self.needs[pool].items():
            most[queue] = room.cpus(cpu_ratio(queues[queue]))
            end = bisect.bisect_right(order, (most[queue], math.inf))
            shapes.extend(shape for _, _, shape in order[:end])
        shapes.extend(s for s in unfit[1] if s in groups and s[1] > most[s[0]])
        return shapes

    def _first_is(self, pool: str, shape: tuple, rank: tuple, was, seq) -> None:
        """The group's first job in submit order is now `seq` (was `was`; None: none), in
        its queue and rank's order of groups (`firsts`)."""
        orders = self.firsts[pool]
        order = orders.setdefault((shape[0], rank), [])
        if was is not None:
            del order[bisect.bisect_left(order, (was,))]
        if seq is None:
            del self.first_seq[(pool, shape, rank)]
            if not order:
                del orders[(shape[0], rank)]
        else:
            bisect.insort(order, (seq, shape))  # seqs are unique: shapes never compared
            self.first_seq[(pool, shape, rank)] = seq

    def _heads(self, pool: str, value) -> list:
        """The start of a pass over every waiting job of the pool in the order schedule_pass
        takes them (its value, then submit order): a heap holding each queue and rank's
        first group, as (-value, seq, tie, None, cursor). `_open` turns a cursor popped
        into that group's stream of jobs, and queues the next group of its rank: the order
        of `push`ing every group's stream, without touching the groups never reached."""
        heads = [
            (-prio, order[0][0], next(self.tie), None, (list(order), 0, rank, prio))
            for (queue, rank), order in self.firsts[pool].items()
            for prio in (value(queue, rank),)
        ]
        heapq.heapify(heads)
        return heads

    def _open(self, pool: str, heads: list, cursor: tuple) -> tuple[SimJob, tuple]:
        """A cursor `_heads` queued, popped: its group's first job and stream of the rest."""
        order, k, rank, prio = cursor
        if k + 1 < len(order):
            entry = (-prio, order[k + 1][0], next(self.tie), None, (order, k + 1, rank, prio))
            heapq.heappush(heads, entry)
        shape = order[k][1]
        self._sort(pool, shape, rank)
        stream = iter(self.groups[pool][shape][rank].values())
        return next(stream), (shape, rank, prio, stream)

    def _sort(self, pool: str, shape: tuple, rank: tuple) -> None:
        if (pool, shape, rank) in self.unsorted:
            self.unsorted.discard((pool, shape, rank))
            members = self.groups[pool][shape][rank]
            ordered = sorted(members.values(), key=lambda j: self.seq[j.key])
            members.clear()
            members.update((j.key, j) for j in ordered)

    def _backfill_shortest(
        self, pool: str, now: float, where: tuple, rank_of: tuple, books: tuple, only
    ) -> None:
        """Behind the pool's reservations the waiting jobs go shortest planned runtime first
        (EASY++'s order; `schedule_pass(backfill="shortest")` decides so in one call): each
        group's jobs in runtime order, merged over the groups; a group stops at its first job
        that cannot start, since a longer one of the same request meets the same
        reservations or more. `only`: the jobs to offer (new arrivals), or None for all."""
        sim, site = self.sim, self.sim.site
        (nodes, room, plan), (value, too_big, crowded, never), books = where, rank_of, books
        stuck, decided, done = books
        heads: list = []
        tie = itertools.count()

        def push_next(group: tuple, i: int) -> None:
            members = self.shortest.get((pool, *group), ())
            while i < len(members):
                planned, seq, key = members[i]
                if key in sim.waiting and key not in decided and (only is None or key in only):
                    if crowded(group[0], planned):  # as schedule_pass would find: it waits,
                        stuck.add(group)  # and so would every longer job of the group
                        return
                    prio = value(group[0][0], group[1])
                    heapq.heappush(heads, (planned, -prio, seq, next(tie), key, group, i))
                    return
                i += 1

        if only is None:
            groups = self.groups[pool]
            for shape in self._may_fit(pool, room, never):
                if not too_big(shape):
                    for rank in groups[shape]:
                        if (shape, rank) not in stuck:
                            push_next((shape, rank), 0)
        else:  # each group from its first job to offer, found by its runtime
            first: dict[tuple, int] = {}
            for key in only:
                job = sim.waiting.get(key)
                if job is not None and key not in decided:
                    group = self.where[key][1:]
                    members = self.shortest[(pool, *group)]
                    i = bisect.bisect_left(members, self._runtime_key(job))
                    first[group] = min(i, first.get(group, i))
            for group, i in first.items():
                if group not in stuck and not too_big(group[0]):
                    push_next(group, i)
        size = 8
        while heads:
            batch: list[WaitingJob] = []
            while heads and len(batch) < size:
                planned, prio, seq, _, key, group, i = heapq.heappop(heads)
                if group in stuck:
                    continue
                if too_big(group[0]):  # the room shrank since it was pushed: as schedule_pass
                    stuck.add(group)  # would find, it waits, and so does the rest of its group
                    continue
                job = sim.waiting[key]
                queue = site.queues[group[0][0]]
                batch.append(WaitingJob(key, job.spec, queue, -prio, seq, runtime_s=planned))
                push_next(group, i + 1)
            size *= 2
            if not batch:
                break
            decisions = schedule_pass(
                batch,
                pools={pool: nodes},
                allocations=sim.allocations,
                running=sim.per_queue,
                drained=sim.down,
                now=now,
                rooms={pool: room},
                plans={pool: plan},
                backfill="shortest",
            )
            for d in decisions:
                if not self._carry_out(pool, d, now, done):
                    stuck.add(self.where[d.key][1:])

    def _carry_out(self, pool: str, d, now: float, done: list[SimJob]) -> bool:
        """Start or refuse what the pass decided (`done` gets the job); False for a wait."""
        job = self.sim.waiting[d.key]
        if isinstance(d, Start):
            self._start(job, d.placement, now)
            self.since[pool].add(job.key)
        elif isinstance(d, Fail):
            self.sim.refuse(d.key, d.reason)
            self._release(job, now)
        else:
            return False
        done.append(job)
        return True
