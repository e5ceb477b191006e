"""Predicted runtimes in the site policy's plans (docs/predictions.md).

Each job is planned for its predicted runtime where it has one — from the last two runs of
the same work (user, project, command) that had ended when it became ready: its walltime
times the share of their walltimes they used (`predict`) — and for its walltime otherwise. The prediction orders the jobs behind a
reservation and places the running work's ends in the plan; the job still runs its own
runtime (the walltime ends it, never the prediction). A job still running at its predicted
end is planned anew at that moment (`corrected`), and its pool's plan is made again.
"""

from __future__ import annotations

from scheduling.decisions.predict import History, history_key, planned_runtime
from scheduling.decisions.reserve import Plan
from simulation.simulator.model import SimJob
from simulation.simulator.state import OUTLIVED, WHOLE_SITE, Sim


class Predictions:
    """The predicting half of `SitePolicy`: history, each waiting job's prediction, and the
    planned ends of running jobs."""

    sim: Sim
    history: History
    predicted: dict[str, float]  # job → its prediction, fixed when it became ready
    work: dict[str, str]  # job → its history key
    groups: dict[str, dict]  # pool → its waiting jobs (`Groups`)
    plans: dict[str, Plan]  # pool → its reservations (`Groups`)

    def _predict(self, job: SimJob) -> None:
        """Fix the job's prediction as it becomes ready, from the runs ended by now."""
        key = self.work.get(job.key)
        if key is None:
            key = self.work[job.key] = history_key(job.user, job.project, job.spec)
        walltime = job.spec.walltime_s or job.runtime
        predicted = self.history.predict(key, walltime)
        if predicted is None:
            self.predicted.pop(job.key, None)
        else:
            self.predicted[job.key] = predicted

    def _planned(self, job: SimJob) -> float:
        """How long the job is planned to run: its prediction, else its walltime (the trace's
        runtime if it has none)."""
        predicted = self.predicted.get(job.key)
        if predicted is not None:
            return predicted
        return job.spec.walltime_s or job.runtime

    def _ran(self, job: SimJob) -> None:
        """The job ended on its own: one more run of its work."""
        self.history.record(self.work[job.key], job.runtime, job.spec.walltime_s)

    def _plan_started(self, job: SimJob) -> None:
        """The job has just started: its plan ends at its prediction; if it will still run
        then, the plan is corrected at that moment (`OUTLIVED`)."""
        predicted = self.predicted.get(job.key)
        if predicted is None:
            return  # planned by its walltime, as `Sim.start` set
        self.sim.run.predicted[job.key] = predicted
        outcome = self.sim.running[job.key]
        outcome.planned_end = outcome.start + predicted
        if outcome.planned_end < outcome.end:
            self.sim.at(outcome.planned_end, OUTLIVED, job.key)

    def _outlived(self, key: str, now: float) -> None:
        """A job runs past its planned end: plan it to the next correction step (at most its
        walltime), and make its pool's plan again (a full pass, as when room frees)."""
        outcome = self.sim.running.get(key)
        if outcome is None or outcome.planned_end != now:
            return  # ended, or stopped and started again since (it has a newer plan)
        job = self.sim.jobs[key]
        walltime = job.spec.walltime_s or job.runtime
        predicted = self.predicted[key]
        runtime = planned_runtime(max(now - outcome.start, predicted), predicted, walltime)
        # `now - start` may round just below the step it reached: then the step after it.
        while runtime is not None and outcome.start + runtime <= now and runtime < walltime:
            runtime = planned_runtime(runtime, predicted, walltime)
        outcome.planned_end = outcome.start + (runtime or walltime)
        if outcome.planned_end < outcome.end:
            self.sim.at(outcome.planned_end, OUTLIVED, key)
        for pool in {self.sim.pool_of.get(a.node, WHOLE_SITE) for a in outcome.allocations}:
            if self.groups.get(pool):
                self.sim.dirty.add(pool)
                self.sim.freed.add(pool)
            else:  # nothing waits there: only the next arrival needs a plan, made anew
                self.plans.pop(pool, None)
