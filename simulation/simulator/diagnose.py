"""Why a validation-day criterion fails: the policy difference, read from Switchyard's run.

Each function takes the day's runs and returns one sentence naming what in Switchyard's run
caused the row's value (a quota that held work while its pool had idle room, later work that
took the room a big job needed, preemptions), beside what the baselines did. No Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from simulation.simulator.model import Outcome, Run, SimJob, Site

BURST_TRAINING = ("train-0", "train-1")
PAIR = ("hpc-0", "train-0")
STEP_S = 60.0  # the GPU row's idle room is sampled once a minute


@dataclass(frozen=True, slots=True)
class Day:
    site: Site
    jobs: Mapping[str, SimJob]
    runs: Mapping[str, Run]
    window: tuple[float, float]

    @property
    def mine(self) -> Run:
        return self.runs["switchyard"]

    def pool_nodes(self, key: str) -> set[str]:
        """The nodes of the pool `key` ran in under Switchyard (all of them for a baseline);
        its own queue's pool where it ran on another's idle cores (`lender`)."""
        if self.lender(key):
            queue = self.site.queues.get(self.jobs[key].queue)
            return {n.name for n in self.site.pools[queue.pool]} if queue else set()
        return self._ran_in(key)[1]

    def lender(self, key: str) -> str | None:
        """The pool whose idle cores `key` borrowed (docs/policy.md, "Backfill across
        pools"), or None: a CPU job on another pool's nodes (a lease lends GPU work's)."""
        job, (pool, _) = self.jobs.get(key), self._ran_in(key)
        if job is None or job.spec.resources.gpus or job.queue not in self.site.queues:
            return None
        return None if pool in (None, self.site.queues[job.queue].pool) else pool

    def _ran_in(self, key: str) -> tuple[str | None, set[str]]:
        outcome = self.mine.outcomes.get(key)
        if outcome is None or not outcome.allocations:
            return None, set()
        first = outcome.allocations[0].node
        for pool, nodes in self.site.pools.items():
            names = {n.name for n in nodes}
            if first in names:
                return pool, names
        return None, set()

    def idle_gpus(self, run: Run, nodes: set[str], at: float) -> int:
        return self.idle(run, nodes, at)[1]

    def idle(self, run: Run, nodes: set[str], at: float) -> tuple[int, int, int, int]:
        """Free cores, free GPUs, cores and GPUs of `nodes` at `at` in `run`."""
        views = [n for pool in self.site.pools.values() for n in pool if n.name in nodes]
        cpus, gpus = sum(n.cpus for n in views), sum(n.gpus for n in views)
        busy_cpus = busy_gpus = 0
        for s in run.spans:
            if s.start <= at < s.end:
                for a in s.allocations:
                    if a.node in nodes:
                        busy_cpus += a.cpus
                        busy_gpus += len(a.gpu_indices)
        return max(0, cpus - busy_cpus), gpus - busy_gpus, cpus, gpus


def _duration(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds < 600 else f"{seconds / 60:,.1f} min"


def _held(run: Run, o: Outcome) -> float:
    """How long its project's quota held it before it could wait for room."""
    return max(0.0, run.queued.get(o.key, o.submit) - o.submit)


def _started_meanwhile(day: Day, key: str) -> list[Outcome]:
    """Jobs that started in `key`'s pool while it waited there (after its quota let it)."""
    run, o = day.mine, day.mine.outcomes[key]
    nodes = day.pool_nodes(key)
    ready = run.queued.get(key, o.submit)
    first = o.submit + o.wait  # its first start
    return [
        other
        for other in run.outcomes.values()
        if other.key != key
        and ready <= other.submit + other.wait < first
        and any(a.node in nodes for a in other.allocations)
    ]


def _waited(day: Day, key: str, what: str) -> str:
    """Why one job waited under Switchyard: its quota, or other work taking its room."""
    run = day.mine
    o = run.outcomes.get(key)
    if o is None:
        return f"{what} never ran under Switchyard: {run.never.get(key, 'no reason recorded')}."
    held = _held(run, o)
    if held >= o.wait / 2 and held > 0:
        idle = day.idle_gpus(run, day.pool_nodes(key), o.submit)
        return (
            f"{what} ({o.project}) waited {_duration(held)} on its project's quota in its "
            f"queue while its pool had {idle} idle GPUs when it arrived."
        )
    asked = day.jobs[key].spec.resources
    size = f"{asked.nodes} whole nodes" if asked.nodes else f"{asked.cpus} cores"
    free_cpus, free_gpus, cpus, gpus = day.idle(run, day.pool_nodes(key), o.submit)
    room = (
        f"its pool had {free_gpus} of {gpus} GPUs free when it arrived"
        if asked.gpus
        else f"its pool had {free_cpus} of {cpus} cores free when it arrived"
    )
    if lender := day.lender(key):
        return f"{what} ({size}) waited {_duration(o.wait)}: {room}; it ran on pool {lender}'s idle cores."
    others = _started_meanwhile(day, key)
    if not others:
        return f"{what} ({size}) waited {_duration(o.wait)}: {room}, and no room freed for it."
    later = sum(1 for x in others if x.submit > o.submit)
    smaller = sum(1 for x in others if _smaller(day.jobs[x.key], day.jobs[key]))
    kinds = ", ".join(sorted({x.type for x in others}))
    return (
        f"{what} ({size}) waited {_duration(o.wait)}: {room}, and while it waited "
        f"{len(others)} other job{'s' if len(others) > 1 else ''} ({kinds}; {smaller} smaller "
        f"than it, {later} submitted after it) started in its pool on the room that freed."
    )


def _smaller(job: SimJob, than: SimJob) -> bool:
    a, b = job.spec.resources, than.spec.resources
    return (a.gpus, a.cpus) < (b.gpus, b.cpus) and a.gpus <= b.gpus and a.cpus <= b.cpus


def _baselines(day: Day, key: str) -> str:
    waits = {
        p: r.outcomes[key].wait for p in ("fifo", "easy") if key in (r := day.runs[p]).outcomes
    }
    shown = " and ".join(f"{_duration(w)} under {p.upper()}" for p, w in waits.items())
    return f" It waited {shown}." if shown else ""


def agents(day: Day) -> str:
    run = day.mine
    waited = [o for o in run.outcomes.values() if o.type == "agent"]
    full = [o for o in waited if o.room_at_submit is False]
    if not waited:
        return "no agent ran under Switchyard."
    worst = max(waited, key=lambda o: o.wait)
    return (
        f"{len(full)} of {len(waited)} agents found their pool with no room on arrival; the "
        f"longest waited {_duration(worst.wait)}."
    )


def training_with_room(day: Day) -> str:
    run = day.mine
    roomy = [o for o in run.outcomes.values() if o.type == "ai-training" and o.room_at_submit]
    if not roomy:
        never = sum(1 for t in run.never_types.values() if t == "ai-training")
        return f"{never} trainings never ran under Switchyard."
    worst = max(roomy, key=lambda o: o.wait)
    return _waited(day, worst.key, f"Training {worst.key}") + _baselines(day, worst.key)


def burst_training(day: Day) -> str:
    run = day.mine
    done = [run.outcomes[k] for k in BURST_TRAINING if k in run.outcomes]
    if len(done) < len(BURST_TRAINING):
        missing = next(k for k in BURST_TRAINING if k not in run.outcomes)
        return _waited(day, missing, f"Training {missing}")
    worst = max(done, key=lambda o: o.wait)
    said = _waited(day, worst.key, f"Training {worst.key}") + _baselines(day, worst.key)
    soonest = soonest_both(day)
    if soonest is None:
        return said
    wait, free, total = soonest
    return (
        f"{said} First in line, with nothing preempted, both could have started at the "
        f"earliest {_duration(wait)} after they arrived (their pool had {free} of its {total} "
        "nodes free then; running work held the rest)."
    )


def soonest_both(day: Day) -> tuple[float, int, int] | None:
    """The soonest the mix's trainings could both have started, under any order that
    preempts nothing, from their pool as Switchyard's run had it when they arrived: the
    moment the last of the whole nodes they need together was freed by the work running on
    it then (training is never preempted). With how many of the pool's nodes were free on
    arrival, and how many it has; None if they never ran."""
    run = day.mine
    if any(k not in run.outcomes for k in BURST_TRAINING):
        return None
    jobs = [day.jobs[k] for k in BURST_TRAINING]
    at = max(j.submit for j in jobs)
    free_at = {node: at for node in day.pool_nodes(BURST_TRAINING[0])}
    for span in run.spans:
        if span.start <= at < span.end:
            for a in span.allocations:
                if a.node in free_at:
                    free_at[a.node] = max(free_at[a.node], span.end)
    need = sum(j.spec.resources.nodes or 1 for j in jobs)
    times = sorted(free_at.values())
    if len(times) < need:
        return None
    return times[need - 1] - at, sum(1 for t in times if t == at), len(times)


def hpc_preempted(day: Day) -> str:
    lo, hi = day.window
    spans = [
        s
        for s in day.mine.spans
        if s.type == "hpc-simulation" and s.ended == "preempted" and lo <= s.end <= hi
    ]
    queues = sorted({day.jobs[s.key].queue for s in spans})
    return (
        f"{len(spans)} HPC runs were preempted in queue {', '.join(queues)}, which the site "
        "marks preemptible."
    )


def gpu_idle(day: Day) -> str:
    """GPU-hours idle while GPU work waited, and the share of them while quota held it."""
    idle, held = _idle_while_waiting(day, day.mine)
    fifo, _ = _idle_while_waiting(day, day.runs["fifo"])
    return (
        f"between 08:00 and 18:00 GPUs sat idle while GPU work waited for {idle:,.0f} GPU-hours "
        f"under Switchyard ({held:,.0f} of them while their projects' quotas held that work), "
        f"against {fifo:,.0f} under FIFO."
    )


def _idle_while_waiting(day: Day, run: Run) -> tuple[float, float]:
    """Sampled each `STEP_S` over the window: GPU-hours free while GPU work waited (at most
    what the waiting work asked), and of those, while quotas held it."""
    lo, hi = day.window
    gpus = sum(n.gpus for pool in day.site.pools.values() for n in pool)
    spans = [(s.start, s.end, sum(len(a.gpu_indices) for a in s.allocations)) for s in run.spans]
    spans = [x for x in spans if x[2]]
    asks = [
        (o.submit, run.queued.get(o.key, o.submit), o.submit + o.wait, gpus_asked)
        for o in run.outcomes.values()
        if (gpus_asked := day.jobs[o.key].spec.resources.gpus)
    ]
    idle = held = 0.0
    t = lo
    while t < hi:
        free = gpus - sum(n for a, b, n in spans if a <= t < b)
        waiting = sum(g for s, _, f, g in asks if s <= t < f)
        on_quota = sum(g for s, q, f, g in asks if s <= t < min(q, f))
        idle += min(free, waiting) * STEP_S / 3600
        held += min(free, on_quota) * STEP_S / 3600
        t += STEP_S
    return idle, held


def pair_flow(day: Day) -> str:
    hpc, training = PAIR
    return (
        f"{_waited(day, hpc, f'The HPC run {hpc}')}{_baselines(day, hpc)} "
        f"{_waited(day, training, f'Its training {training}')}{_baselines(day, training)}"
    )
