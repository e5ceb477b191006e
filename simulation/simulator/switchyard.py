"""The site's own policy in the simulator, through the live engine's decision functions.

What the portal does around a backend's scheduling pass, in the same order: admission against
the quotas (`admit`; held work is reconsidered when its scope's work ends), levels that move
while a task waits (`level`, `next_change`), the start order (`priority_value` from the level,
the time of day's `weight_at` and the fair-share factor of `share_factors` over
`decayed_usage`), the pass itself (`schedule_pass`, per pool), preemption (`whom_to_preempt`,
for tasks waiting longer than the site's preempt delay) and daily leases (`lend`, nodes taken
back at the lease's end). docs/simulation.md says what is simplified.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from scheduling.decisions.lend import Loan
from scheduling.decisions.levels import Waiting, cap_of, level, next_change, rule_for
from scheduling.decisions.order import (
    OVERDUE,
    decay_rate,
    decayed,
    decayed_usage,
    order_key,
    overdue,
    share_factors,
    weight_at,
)
from scheduling.decisions.order import Run as UsageRun
from scheduling.decisions.place import cpu_ratio, place
from scheduling.decisions.predict import History
from scheduling.decisions.preempt import Running, whom_to_preempt
from scheduling.decisions.quota import Admit, Ask, QuotaRule, Reject, Usage, admit
from scheduling.decisions.schedule import WaitingJob, schedule_pass
from simulation.simulator.crosspool import CrossPool
from simulation.simulator.groups import Groups, push
from simulation.simulator.leases import Leases
from simulation.simulator.model import SimJob
from simulation.simulator.quotas import Cohorts
from simulation.simulator.state import LEASE_END, LEASE_OPEN, OUTLIVED, TICK, Sim

EPOCH = datetime(2026, 1, 5, tzinfo=UTC)  # t = 0 of every run; levels take datetimes


def _clock(t: float) -> datetime:
    return EPOCH + timedelta(seconds=t)


class SitePolicy(Leases, Groups, CrossPool):
    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        site = sim.site
        self.pools = {name: tuple(nodes) for name, nodes in site.pools.items()}
        self.loans: dict[str, Loan] = {}
        self.leases: dict[str, tuple[str, ...]] = {}
        self._lend()
        self.preemptible = {q.pool for q in site.queues.values() if q.preemptible}
        self.pool_of_queue = {q.name: q.pool for q in site.queues.values()}
        self.ratios = {name: cpu_ratio(q) for name, q in site.queues.items()}
        self._filing()  # groups.py: the waiting jobs, filed
        self.fresh: dict[str, dict[str, SimJob]] = defaultdict(dict)  # ready since the last pass
        self.level: dict[str, int] = {}
        self.overdue: set[str] = set()  # waiting past their queue's bound (order.OVERDUE)
        self.seq: dict[str, int] = {}
        self._seq = itertools.count()
        self.admitted: set[str] = set()
        self.held: dict[str, SimJob] = {}
        self.usage: dict[tuple[str, str, str | None], Usage] = {}
        # Fair share per queue and project: decayed use of ended runs as of a time, and the
        # runs going on now.
        self.spent: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)
        self.going: dict[str, dict[str, UsageRun]] = defaultdict(dict)
        self.history, self.predicted, self.work = History(), {}, {}  # docs/predictions.md
        for i, lease in enumerate(site.leases):
            hour, minute = (int(x) for x in lease.start.split(":"))
            offset = ((hour * 60 + minute - site.start_minute) % (24 * 60)) * 60
            sim.at(float(offset), LEASE_OPEN, str(i))

    # -- the loop's calls ---------------------------------------------------------------

    def arrive(self, job: SimJob, now: float) -> None:
        sim, queue = self.sim, self.sim.site.queues.get(job.queue)
        if queue is None:
            sim.refuse(job.key, f"no queue {job.queue!r} in the site")
            return
        # Whether the pool had room for it on arrival, whatever its quota says.
        if sim.record_room:  # room, and nobody waiting before it there
            sim.room[job.key] = (
                not self.groups.get(queue.pool)
                and place(job.spec, queue, sim.views(queue.pool), now=now) is not None
            )
        rules, cohort = self._rules(job)
        decision = admit(self._ask(job), rules, self.usage, cohort=cohort)
        if isinstance(decision, Reject):
            sim.refuse(job.key, f"refused: {decision.reason}")
            return
        if not isinstance(decision, Admit):
            self.held[job.key] = job
            return
        self._admit(job, decision)
        self._ready(job, now)

    def ended(self, job: SimJob, now: float) -> None:
        self._ran(job)
        self._stopped(job, now)
        self._release(job, now)

    def _release(self, job: SimJob, now: float) -> None:
        """The job is done (ended, or failed): its quota use goes back; held work may start."""
        if job.key in self.admitted:
            self.admitted.discard(job.key)
            self.cohorts.borrowed.pop(job.key, None)
            ask = self._ask(job)
            for scope in self._scopes(job):
                u = self.usage[scope]
                self.usage[scope] = Usage(u.gpus - ask.gpus, u.cpus - ask.cpus, u.tasks - 1)
            self._release_held(job, now)

    def requeued(self, job: SimJob, now: float, why: str) -> None:
        self._stopped(job, now)
        self._ready(job, now)

    def event(self, kind: int, key: str, now: float) -> None:
        if kind == TICK:
            job = self.sim.waiting.get(key)
            if job is not None:
                level = self._level(job, now)
                queue = self.sim.site.queues[job.queue]
                late = overdue(now - self.sim.ready[key], queue.wait_bound_s)
                if level != self.level[key] or late != (key in self.overdue):
                    self._unbucket(job)
                    self.level[key] = level
                    if late:  # first in its pool's order: the plan is made anew for it
                        self.overdue.add(key)
                        self.sim.freed.add(queue.pool)
                        self.sim.dirty.add(queue.pool)
                    self._bucket(job)
                if queue.pool in self.preemptible:
                    self.sim.dirty.add(queue.pool)
        elif kind == LEASE_OPEN:
            self._open_lease(int(key), now)
        elif kind == LEASE_END:
            self._end_lease(key, now)
        elif kind == OUTLIVED:
            self._outlived(key, now)

    def schedule(self, now: float) -> None:
        sim = self.sim
        for _ in range(3):  # a preemption frees room: one more pass for what it left
            pools, sim.dirty = sorted(sim.dirty), set()
            for pool in pools:
                if pool in self.pools:
                    self._pass(pool, now)
                    if pool in self.preemptible:
                        self._preempt(pool, now)
            if self.sim.site.borrowing:
                self._borrow(pools, now)  # crosspool.py
            if not sim.dirty:
                return

    # -- one pool's pass --------------------------------------------------------------------

    def _pass(self, pool: str, now: float) -> None:
        """Offer the pool's waiting jobs to `schedule_pass`, in its own order, a batch at a
        time, each batch on the room the last one left: the same decisions as one call over
        every waiting job, without building the ones that could not start.

        Waiting jobs are kept in groups of the same request and the same place in the order
        (queue, level, type, project), each group in submit order: when a group's first job
        must wait, so must the rest. Only room freed (an end, a node back, a lease) can start
        a job that waited after the last pass; with none, only the jobs that became ready
        since are offered.
        """
        sim, site = self.sim, self.sim.site
        fresh = self.fresh.pop(pool, {})
        groups = self.groups.get(pool)
        if not groups:
            return
        room = sim.pool_room(pool)
        ratios = self.ratios
        minute = self._minute(now)
        shares: dict[str, dict[str, float]] = {}
        values: dict[tuple, int] = {}

        def value(queue: str, rank: tuple) -> int:  # rank: (level, type, project, borrowed)
            if (queue, rank) not in values:
                if queue not in shares:
                    shares[queue] = self._shares(queue, now)
                values[(queue, rank)] = self._value(queue, rank, minute, shares[queue])
            return values[(queue, rank)]

        nodes = sim.pool_nodes(pool)
        never = self._never(pool, nodes)  # shape → True if it fits not even the emptied pool
        plan = self._plan(pool, nodes, now, fresh=pool not in sim.freed)

        big: set[tuple] = set()  # too big: room only shrinks in a pass, so they stay so

        def too_big(shape: tuple) -> bool:  # for the room now, yet it could fit some day
            if shape in big:
                return True
            if shape[2] <= room.gpus and shape[1] <= room.cpus(ratios[shape[0]]):
                return False
            if never(shape, site.queues[shape[0]]):
                return False  # schedule_pass must fail it
            big.add(shape)
            return True

        def crowded(shape: tuple, planned: float) -> bool:
            """Whether a job of `shape` that runs `planned` seconds meets reservations that
            leave too little beside them (and could fit some day: else it must be failed)."""
            cpus, gpus = plan.totals(room.listed(), now + planned, ratios[shape[0]])
            if cpus < 0 or (shape[1] <= cpus and shape[2] <= gpus):
                return False
            return not never(shape, site.queues[shape[0]])

        def hopeless(shape: tuple) -> bool:  # too big, and not one that may get a reservation
            if len(plan.blocked) < plan.reserve and (plan.whole_pass or not plan.full):
                return False
            return too_big(shape)

        heads: list = []  # (-value, seq, tie, job, stream): the next job of each stream
        tie = self.tie
        if pool in sim.freed:  # every waiting job is offered, against a plan made anew
            sim.freed.discard(pool)
            heads = self._heads(pool, value)
        else:
            for job in fresh.values():
                if job.key in sim.waiting:
                    shape, rank = self.where[job.key][1:]
                    push(heads, (shape, rank, value(shape[0], rank), iter((job,))), tie, self.seq)
        size, stuck = 8, set()
        done: list[SimJob] = []
        decided: set[str] = set()
        cut: dict[tuple, float] = {}  # group → the end from which its jobs cannot start
        # On a lent node only work that ends before the lease does may start: there one job
        # of a shape may wait while a shorter one starts.
        lent = self._lent(nodes)
        shortest_first = site.backfill == "shortest"
        while heads:
            if shortest_first and plan.full:
                break  # the rest go shortest first, below
            if shortest_first:
                size = 1  # until the reservations are made: one at a time, in priority order
            batch: list[WaitingJob] = []
            while heads and len(batch) < size:
                _, _, _, job, stream = heapq.heappop(heads)
                if job is None:  # a group reached: its jobs join the heap
                    job, stream = self._open(pool, heads, stream)
                shape, rank, prio, _ = stream
                if (shape, rank) in stuck:
                    continue
                if hopeless(shape):
                    stuck.add((shape, rank))
                    continue
                if plan.full and plan.held_for(job.key) is None:
                    # Even its shortest job meets reservations that leave too little beside
                    # (and none is left to give it).
                    soonest = now + self.shortest[(pool, shape, rank)][0][0]
                    cpus, gpus = plan.totals(room.listed(), soonest, ratios[shape[0]])
                    if cpus >= 0 and (shape[1] > cpus or shape[2] > gpus):
                        stuck.add((shape, rank))
                        continue
                limit = cut.get((shape, rank))
                if limit is not None:  # only what ends before `limit` may start
                    if now + self.shortest[(pool, shape, rank)][0][0] >= limit:
                        stuck.add((shape, rank))
                        continue
                    if now + self._planned(job) >= limit:
                        push(heads, stream, tie, self.seq)
                        continue
                batch.append(
                    WaitingJob(
                        job.key,
                        job.spec,
                        site.queues[shape[0]],
                        prio,
                        self.seq[job.key],
                        runtime_s=self._planned(job),
                    )
                )
                push(heads, stream, tie, self.seq)
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
                rooms={pool: room},  # the pass updates it as it starts jobs
                plans={pool: plan},  # … and its reservations
            )
            for d in decisions:
                job = sim.waiting[d.key]
                decided.add(d.key)
                if self._carry_out(pool, d, now, done):
                    continue
                if d.key in plan.passed:  # what ends later than it cannot start either
                    group = self.where[d.key][1:]
                    cut[group] = min(cut.get(group, math.inf), now + self._planned(job))
                elif not lent and plan.full:
                    # It found no room at all: the rest of its group would wait too.
                    stuck.add(self.where[d.key][1:])
        if shortest_first and plan.full:
            only = None if plan.whole_pass else set(fresh)
            self._backfill_shortest(
                pool,
                now,
                (nodes, room, plan),
                (value, too_big, crowded, never),
                (stuck, decided, done),
                only,
            )
        for job in done:
            self._unbucket(job)

    def _preempt(self, pool: str, now: float) -> None:
        sim, site = self.sim, self.sim.site
        after = site.preempt_after_s
        waiting = [
            j
            for j in sim.waiting.values()
            if site.queues[j.queue].pool == pool and now - sim.ready[j.key] >= after
        ]
        if not waiting:
            return
        names = {name for name, p in sim.pool_of.items() if p == pool}
        nodes = [sim.nodes[name] for name in names]
        running = [
            Running(
                key,
                o.type,
                self.level.get(key, 0),
                site.queues[sim.jobs[key].queue].preemptible,
                o.allocations,
                o.start,
                self.cohorts.borrowed.get(key, ""),
            )
            for key, o in sim.running.items()
            if any(a.node in names for a in o.allocations)
        ]
        minute = self._minute(now)

        def order(job: SimJob) -> tuple:
            weight = weight_at(site.weights.get(job.queue, ()), job.type, minute)
            return order_key(
                level=OVERDUE if job.key in self.overdue else self.level[job.key],
                weight=weight,
                share=1.0,
                ready_at=sim.ready[job.key],
                task_id=self.seq[job.key],
                borrowed=self._borrows(job),
            )

        for job in sorted(waiting, key=order):
            queue = site.queues[job.queue]
            reclaim = self.cohorts.reclaims(job)  # borrowed work yields to a lender
            decision = whom_to_preempt(
                job.spec, queue, self.level[job.key], nodes, running, now=now, reclaim=reclaim
            )
            if decision is None:
                continue
            for victim in decision.victims:
                self.requeued(sim.stop(victim, now, "preempted"), now, "preempted")
            running = [r for r in running if r.key not in decision.victims]
            self._unbucket(job)
            self._start(job, decision.placement, now)
            running.append(
                Running(
                    job.key,
                    job.type,
                    self.level[job.key],
                    queue.preemptible,
                    decision.placement.allocations,
                    now,
                    self.cohorts.borrowed.get(job.key, ""),
                )
            )

    # -- bookkeeping ------------------------------------------------------------------------

    def _start(self, job: SimJob, placement, now: float) -> None:
        self.sim.start(job, placement, now)
        self.overdue.discard(job.key)
        self._plan_started(job)
        if self.sim.site.queues[job.queue].policy == "fairshare":
            units = float(job.spec.resources.gpus or job.spec.resources.cpus)
            self.going[job.queue][job.key] = UsageRun(units, now)

    def _stopped(self, job: SimJob, now: float) -> None:
        self._home_freed(job)  # crosspool.py
        self._held.pop(job.key, None)
        run = self.going[job.queue].pop(job.key, None)
        if run is None:
            return
        half = self.sim.site.half_life_s
        spent, since = self.spent[job.queue].get(job.project, (0.0, now))
        spent = spent * 2 ** (-(now - since) / half)
        spent += decayed_usage([UsageRun(run.units, run.start, now)], now, half)
        self.spent[job.queue][job.project] = (spent, now)

    def _shares(self, queue: str, now: float) -> dict[str, float]:
        if self.sim.site.queues[queue].policy != "fairshare":
            return {}
        half = self.sim.site.half_life_s
        usage: dict[str, float] = {
            project: spent * 2 ** (-(now - since) / half)
            for project, (spent, since) in self.spent[queue].items()
        }
        k, jobs = decay_rate(half), self.sim.jobs
        for key, run in self.going[queue].items():  # decayed_usage([run], ...), inlined
            project = jobs[key].project
            used = usage.get(project, 0.0)
            if now > run.start:
                used += decayed(run.units, run.start, now, now, k)
            usage[project] = used
        return share_factors(usage, self.sim.site.shares)

    def _ready(self, job: SimJob, now: float) -> None:
        sim = self.sim
        sim.enqueue(job, now)
        pool = self.pool_of_queue[job.queue]
        self.fresh[pool][job.key] = job
        self.seq[job.key] = next(self._seq)
        self.overdue.discard(job.key)  # ready again (requeued): its wait starts again
        self.level[job.key] = self._level(job, now)
        self._predict(job)
        self._bucket(job)
        pool = sim.site.queues[job.queue].pool
        if pool in self.preemptible:
            sim.at(now + sim.site.preempt_after_s, TICK, job.key)
        sim.dirty.add(pool)

    def _level(self, job: SimJob, now: float) -> int:
        """Its level now, with a tick where that moves next or it passes its queue's bound."""
        ready = self.sim.ready[job.key]
        bound = self.sim.site.queues[job.queue].wait_bound_s
        rule = rule_for(self.sim.site.level_rules, job.type, job.queue)
        task = Waiting(job.type, job.queue, _clock(ready), cap=cap_of(job.spec.priority))
        moves = next_change(task, rule, _clock(now))
        until = None if bound is None else ready + bound - now  # the time to its bound
        if until is not None and until >= 0 and (moves is None or until < moves):
            moves = until
        if moves is not None:  # a millisecond late, so the level has surely moved
            self.sim.at(now + moves + 0.001, TICK, job.key)
        return level(task, rule, _clock(now)).level

    def _minute(self, now: float) -> int:
        return int(self.sim.site.start_minute + now // 60) % (24 * 60)

    def _ask(self, job: SimJob) -> Ask:
        r = job.spec.resources
        return Ask(job.project, job.queue, job.user, gpus=r.gpus, cpus=r.cpus)

    @functools.cached_property
    def cohorts(self) -> Cohorts:
        return Cohorts(self.sim)

    def _borrows(self, job: SimJob) -> bool:
        return job.key in self.cohorts.borrowed

    def _rules(self, job: SimJob) -> tuple[tuple[QuotaRule, ...], tuple[QuotaRule, ...]]:
        return self.cohorts.rules(job)  # its project's rules in its queue, and the lenders'

    def _scopes(self, job: SimJob):
        return ((job.project, job.queue, None), (job.project, job.queue, job.user))

    def _admit(self, job: SimJob, decision: Admit) -> None:
        self.admitted.add(job.key)
        if decision.borrowed:
            self.cohorts.borrowed[job.key] = job.queue
        ask = self._ask(job)
        for scope in self._scopes(job):
            self.usage[scope] = self.usage.get(scope, Usage()).plus(ask)

    def _release_held(self, ended: SimJob, now: float) -> None:
        """Held work of the ended job's scope may start; where quotas lend, held work of every
        project in its queue too (a lender's unused quota grew)."""
        lends = ended.queue in self.cohorts.lending
        for job in [
            j
            for j in self.held.values()
            if j.queue == ended.queue and (lends or j.project == ended.project)
        ]:
            rules, cohort = self._rules(job)
            decision = admit(self._ask(job), rules, self.usage, cohort=cohort)
            if isinstance(decision, Admit):
                del self.held[job.key]
                self._admit(job, decision)
                self._ready(job, now)
