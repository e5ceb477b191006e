"""The simulated site's quotas as `admit` takes them: each project's rules and its cohort.

A site's quotas are templates every project gets (the live site writes one row per project)
or one project's own rules. The cohort of a project in a queue is the same queue's rules of
every other project. For a template that is every project of the run: each project that has
work in it or a fair share in the site, so a project with no work lends its whole lendable
quota, as an idle project of the live site does. No Django.
"""

from __future__ import annotations

from scheduling.decisions.quota import QuotaRule
from simulation.simulator.model import SimJob
from simulation.simulator.state import Sim

Rules = tuple[tuple[QuotaRule, ...], tuple[QuotaRule, ...]]


class Cohorts:
    """Each (project, queue)'s rules and cohort, built once per run; which jobs borrow."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self._rules: dict[tuple[str, str], Rules] = {}
        self._projects: tuple[str, ...] | None = None
        self.borrowed: dict[str, str] = {}  # job key → the queue it borrows in
        # Queues where some quota may borrow: only there does another project's end matter.
        self.lending = {q.queue for q in sim.site.quotas if q.borrowing_limit > 0}

    def rules(self, job: SimJob) -> Rules:
        """The job's project's rules in its queue, and its cohort's (the lenders)."""
        key = (job.project, job.queue)
        if key not in self._rules:
            self._rules[key] = (self._of(job.project, job.queue), self._cohort(*key))
        return self._rules[key]

    def reclaims(self, job: SimJob) -> str | None:
        """The queue where `job` (admitted, not on borrowed room) may take back lent room:
        its own, when its project's quota there lends."""
        if job.key in self.borrowed:
            return None
        own, _ = self.rules(job)
        return job.queue if any(r.lends for r in own) else None

    def projects(self) -> tuple[str, ...]:
        if self._projects is None:
            names = {j.project for j in self.sim.jobs.values()} | set(self.sim.site.shares)
            self._projects = tuple(sorted(names))
        return self._projects

    def _of(self, project: str, queue: str) -> tuple[QuotaRule, ...]:
        rules = []
        for q in self.sim.site.quotas:
            if isinstance(q, QuotaRule):  # one project's own
                if (q.project, q.queue) == (project, queue):
                    rules.append(q)
            elif q.queue == queue:  # every project's
                rules.append(
                    QuotaRule(
                        project,
                        q.queue,
                        q.resource,
                        q.limit,
                        q.over_quota,
                        borrowing_limit=q.borrowing_limit,
                        lending_limit=q.lending_limit,
                    )
                )
        return tuple(rules)

    def _cohort(self, project: str, queue: str) -> tuple[QuotaRule, ...]:
        if queue not in self.lending:
            return ()
        own = {
            q.project for q in self.sim.site.quotas if isinstance(q, QuotaRule) and q.queue == queue
        }
        every = any(not isinstance(q, QuotaRule) and q.queue == queue for q in self.sim.site.quotas)
        others = (set(self.projects()) if every else own) - {project}
        return tuple(r for p in sorted(others) for r in self._of(p, queue) if r.lends)
