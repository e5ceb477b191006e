"""Backfill across pools in the simulator: after the pools' own passes, the CPU jobs left
waiting in a pool that may borrow go to `borrow_pass` (the live engine's decision) against
the lending pools' free cores and reservations (docs/policy.md, "Backfill across pools").
`SitePolicy` (switchyard.py) keeps the books they use.
"""

from __future__ import annotations

from scheduling.decisions.borrow import Borrowed, borrow_pass
from scheduling.decisions.reserve import Plan
from scheduling.decisions.schedule import WaitingJob
from simulation.simulator.model import SimJob
from simulation.simulator.state import Sim


class CrossPool:
    """The cross-pool half of `SitePolicy`."""

    sim: Sim
    groups: dict[str, dict[tuple, dict[tuple, dict[str, SimJob]]]]
    plans: dict[str, Plan]
    since: dict[str, set[str]]
    seq: dict[str, int]

    def _start(self, job: SimJob, placement, now: float) -> None: ...  # SitePolicy's

    def _unbucket(self, job: SimJob) -> None: ...  # Groups'

    def _shares(self, queue: str, now: float) -> dict[str, float]:
        raise NotImplementedError  # SitePolicy's

    def _minute(self, now: float) -> int:
        raise NotImplementedError  # SitePolicy's

    def _value(self, queue: str, rank: tuple, minute: int, shares: dict[str, float]) -> int:
        raise NotImplementedError  # Groups'

    def _home_freed(self, job: SimJob) -> None:
        """A job of a pool that may borrow stopped: where its queue runs at most so many jobs,
        its pool's waiting jobs may start now even if it ran on another pool's nodes (whose
        end frees room there only), so its own pool gets a full pass too."""
        queue = self.sim.site.queues.get(job.queue)
        if queue is None or queue.max_concurrency is None:
            return
        if any(r.borrower == queue.pool for r in self.sim.site.borrowing):
            self.sim.dirty.add(queue.pool)
            self.sim.freed.add(queue.pool)

    def _borrow(self, passed: list[str], now: float) -> None:
        """Offer the jobs waiting in the borrowing pools to the lending pools' idle cores,
        when a pool of the pair was passed at this moment (a borrower's new work, or room
        freed at a lender: nothing else lets a waiting job borrow)."""
        sim, site = self.sim, self.sim.site
        touched = set(passed)
        rules = [r for r in site.borrowing if r.borrower in touched or r.lender in touched]
        borrowers = {r.borrower for r in rules}
        offered: list[WaitingJob] = []
        shares: dict[str, dict[str, float]] = {}
        minute = self._minute(now)
        for pool in sorted(borrowers):
            for shape, ranks in self.groups.get(pool, {}).items():
                if shape[2] or shape[5]:  # GPUs (or a GPU model) asked: never borrows
                    continue
                queue = site.queues[shape[0]]
                if shape[0] not in shares:
                    shares[shape[0]] = self._shares(shape[0], now)
                for rank, members in ranks.items():
                    value = self._value(shape[0], rank, minute, shares[shape[0]])
                    for job in members.values():
                        offered.append(
                            WaitingJob(job.key, job.spec, queue, value, self.seq[job.key])
                        )
        if not offered:
            return
        lenders = {r.lender for r in rules}
        # A lender with nobody waiting has no reservation to keep (its plan may be stale).
        plans = {p: self.plans[p] for p in lenders if self.groups.get(p) and p in self.plans}
        decisions = borrow_pass(
            offered,
            rules=rules,
            views={p: sim.views(p) for p in lenders},
            plans=plans,
            running=sim.per_queue,
            now=now,
        )
        for d in decisions:
            if not isinstance(d, Borrowed):
                continue
            job = sim.waiting[d.key]
            self._unbucket(job)
            self._start(job, d.placement, now)
            # Planned by its walltime, as it was let in: the lender's next reservation never
            # waits on a prediction of borrowed work (a correction due at its predicted end
            # finds a newer plan, and leaves it).
            outcome = sim.running[job.key]
            outcome.planned_end = outcome.start + (job.spec.walltime_s or job.runtime)
            lender = self.plans.get(d.pool)
            if lender is not None:  # its plan counts it from now on (borrow_pass's, or here)
                if d.pool not in plans:
                    lender.start(d.placement, d.until)
                self.since[d.pool].add(job.key)
            own = site.queues[job.queue].pool
            plan = self.plans.get(own)
            if plan is not None and plan.held_for(job.key) is not None:
                # Its reservation at home goes: what waited behind it may start there now.
                plan.release(job.key)
                sim.dirty.add(own)
                sim.freed.add(own)
