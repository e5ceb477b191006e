"""The waiting jobs of the site policy in the simulator, and each pool's reservations.

Waiting jobs are kept per pool in groups of the same request (`shape`) and the same place
in the order (`rank`: level, type, project), each group in submit order, with its planned
runtimes sorted: a pass offers a group's jobs in turn and stops at the first that cannot
start. `SitePolicy` (switchyard.py) keeps the books; this half files the jobs, makes each
pool's plan, and offers the jobs behind its reservations shortest first.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools

from scheduling.decisions.order import priority_value, weight_at
from scheduling.decisions.place import free_view, place
from scheduling.decisions.reserve import Busy, Plan
from scheduling.decisions.schedule import Fail, Start, WaitingJob, schedule_pass
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.model import SimJob
from simulation.simulator.predicted import Predictions
from simulation.simulator.state import Sim


def shape_of(job: SimJob) -> tuple:
    """What a job asks: jobs of one shape fit, or not, alike (on nodes not lent: there the
    walltime matters too, see `_pass`)."""
    r = job.spec.resources
    return (job.queue, r.cpus, r.gpus, r.memory_mib, r.nodes, r.gpu_type)


def push(heads: list, stream: tuple, tie, seq: dict[str, int]) -> None:
    """The stream's next job onto the heap, in schedule_pass's order (priority, then seq)."""
    job = next(stream[3], None)
    if job is not None:
        heapq.heappush(heads, (-stream[2], seq[job.key], next(tie), job, stream))


class Groups(Predictions):
    """The filing half of `SitePolicy` (planned runtimes: `Predictions`)."""

    sim: Sim
    pool_of_queue: dict[str, str]
    level: dict[str, int]
    seq: dict[str, int]
    groups: dict[str, dict[tuple, dict[tuple, dict[str, SimJob]]]]
    where: dict[str, tuple[str, tuple, tuple]]
    unsorted: set[tuple]
    shortest: dict[tuple, list[tuple[float, int, str]]]
    plans: dict[str, Plan]
    since: dict[str, set[str]]
    _ever: dict[str, tuple]

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

            def busy() -> list[Busy]:
                return [
                    Busy(a, o.planned_end)
                    for key, o in running.items()
                    if key not in since
                    for a in o.allocations
                    if a.node in names
                ]

            # A reservation the last plan made stays where nothing that decided it changed
            # (jobs that ended as planned, or started beside it): it is not made again.
            kept = plan.kept() if plan is not None else {}
            plan = self.plans[pool] = Plan(nodes, busy, now=now, drained=self.sim.down, made=kept)
            self.since[pool] = since
        plan.now = now
        plan.passed.clear()
        plan.blocked.clear()
        plan.whole_pass = not fresh  # else only new arrivals are offered
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

    def _rank(self, job: SimJob) -> tuple:
        """Its place in the order: level, type, project, and whether it was admitted on
        borrowed room (which goes after its level's own-quota work)."""
        return (self.level[job.key], job.type, job.project, self._borrows(job))

    def _bucket(self, job: SimJob) -> None:
        pool = self.pool_of_queue[job.queue]
        shape, rank = shape_of(job), self._rank(job)
        members = self.groups[pool].setdefault(shape, {}).setdefault(rank, {})
        if members and self.seq[next(reversed(members))] > self.seq[job.key]:
            self.unsorted.add((pool, shape, rank))  # moved here by a level change
        members[job.key] = job
        self.where[job.key] = (pool, shape, rank)
        bisect.insort(self.shortest[(pool, shape, rank)], self._runtime_key(job))

    def _unbucket(self, job: SimJob) -> None:
        pool, shape, rank = self.where.pop(job.key)
        planned = self.shortest[(pool, shape, rank)]
        del planned[bisect.bisect_left(planned, self._runtime_key(job))]
        if not planned:
            del self.shortest[(pool, shape, rank)]
        ranks = self.groups[pool][shape]
        del ranks[rank][job.key]
        if not ranks[rank]:
            del ranks[rank]
            if not ranks:
                del self.groups[pool][shape]

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
        (nodes, room, plan), (value, too_big), (stuck, decided, done) = where, rank_of, books
        heads: list = []
        tie = itertools.count()

        def push_next(group: tuple, i: int) -> None:
            members = self.shortest.get((pool, *group), ())
            while i < len(members):
                planned, seq, key = members[i]
                if key in sim.waiting and key not in decided and (only is None or key in only):
                    prio = value(group[0][0], group[1])
                    heapq.heappush(heads, (planned, -prio, seq, next(tie), key, group, i))
                    return
                i += 1

        for shape, ranks in self.groups.get(pool, {}).items():
            if not too_big(shape):
                for rank in ranks:
                    if (shape, rank) not in stuck:
                        push_next((shape, rank), 0)
        size = 8
        while heads:
            batch: list[WaitingJob] = []
            while heads and len(batch) < size:
                planned, prio, seq, _, key, group, i = heapq.heappop(heads)
                if group in stuck:
                    continue
                job = sim.waiting[key]
                queue = site.queues[group[0][0]]
                batch.append(
                    WaitingJob(
                        key, job.spec, queue, -prio, seq, ready_at=sim.ready[key], runtime_s=planned
                    )
                )
                push_next(group, i + 1)
            size *= 2
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
