"""A discrete-event simulator of the site: arrivals and ends in virtual time, scheduled by
the same pure decisions the live engine and the local backend call (docs/simulation.md).

Plain Python, no Django: the site is decision values (`NodeView`, `QueuePolicy`), a job is a
`TaskSpec` with a queue, a submit time and how long it really runs. Three policies:

- `fifo`: one undifferentiated queue over the whole site in submit order; the first job that
  does not fit stops everyone behind it.
- `easy`: EASY backfill over the same single queue: the first waiting job gets a reservation
  at the earliest time the running jobs' walltimes free room for it; a job behind it may start
  now if it fits now and its walltime ends by then.
- `switchyard`: the site's queues and pools, each job placed by `schedule_pass` exactly as
  the local backend places it (whole nodes or packing, CPU oversubscription, GPUs never
  shared, one switch where possible), in priority then submit order.

Started here; still to come (issue 13): levels, fair share, preemption and lending in the
`switchyard` policy, workloads from SWF and the Alibaba trace, and the console page.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.decisions.place import free_view, place
from scheduling.decisions.schedule import Fail, Start, WaitingJob, schedule_pass
from scheduling.decisions.types import NodeAllocation, NodeView, QueuePolicy
from scheduling.spec import TaskSpec

POLICIES = ("fifo", "easy", "switchyard")
# The single queue of the baselines: the whole site, packed, no oversubscription.
WHOLE_SITE = "site"


@dataclass(frozen=True, slots=True)
class SimJob:
    key: str
    spec: TaskSpec  # what it asks for; spec.walltime_s is what a scheduler may plan with
    type: str
    queue: str  # its queue under the `switchyard` policy
    submit: float  # seconds from the start of the run
    runtime: float  # how long it really runs (≤ its walltime)
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Site:
    pools: Mapping[str, Sequence[NodeView]]
    queues: Mapping[str, QueuePolicy]


@dataclass(slots=True)
class Outcome:
    key: str
    type: str
    submit: float
    start: float
    end: float
    planned_end: float  # start + walltime: what a scheduler plans with (not the runtime)
    allocations: tuple[NodeAllocation, ...] = ()

    @property
    def wait(self) -> float:
        return self.start - self.submit


@dataclass(slots=True)
class Run:
    policy: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    never: dict[str, str] = field(default_factory=dict)  # key → why it can never run


def simulate(jobs: Iterable[SimJob], site: Site, policy: str) -> Run:
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    jobs = sorted(jobs, key=lambda j: (j.submit, j.key))
    order = {job.key: i for i, job in enumerate(jobs)}
    if policy == "switchyard":
        pools = {name: tuple(nodes) for name, nodes in site.pools.items()}
        queue_of = {job.key: site.queues[job.queue] for job in jobs}
    else:
        everything = tuple(n for nodes in site.pools.values() for n in nodes)
        pools = {WHOLE_SITE: everything}
        one = QueuePolicy(name=WHOLE_SITE, pool=WHOLE_SITE, task_types=())
        queue_of = {job.key: one for job in jobs}
    run = Run(policy)
    events: list[tuple[float, int, str, str]] = []  # (time, tie-break, kind, key)
    tie = itertools.count()
    for job in jobs:
        heapq.heappush(events, (job.submit, next(tie), "arrive", job.key))
    by_key = {job.key: job for job in jobs}
    waiting: list[SimJob] = []
    allocations: dict[str, list[NodeAllocation]] = {}
    running: dict[str, Outcome] = {}
    while events:
        now = events[0][0]
        while events and events[0][0] == now:  # everything that happens at this moment
            _, _, kind, key = heapq.heappop(events)
            if kind == "arrive":
                waiting.append(by_key[key])
            else:
                done = running.pop(key)
                for a in done.allocations:
                    allocations[a.node].remove(a)
        starts = _pass(
            policy, waiting, pools, queue_of, allocations, running, by_key, order, now, run
        )
        for job, placement in starts:
            waiting.remove(job)
            outcome = Outcome(job.key, job.type, job.submit, now, now + job.runtime,
                              now + (job.spec.walltime_s or job.runtime),
                              placement.allocations)  # fmt: skip
            running[job.key] = outcome
            run.outcomes[job.key] = outcome
            for a in placement.allocations:
                allocations.setdefault(a.node, []).append(a)
            heapq.heappush(events, (outcome.end, next(tie), "end", job.key))
    for job in waiting:
        run.never.setdefault(job.key, "never started")
    return run


def _pass(policy, waiting, pools, queue_of, allocations, running, by_key, order, now, run):
    if policy == "switchyard":
        decided = schedule_pass(
            [WaitingJob(j.key, j.spec, queue_of[j.key], j.priority, order[j.key]) for j in waiting],
            pools=pools,
            allocations=allocations,
            running=_per_queue(running, queue_of),
        )
        starts = []
        for d in decided:
            if isinstance(d, Start):
                starts.append((by_key[d.key], d.placement))
            elif isinstance(d, Fail):
                run.never[d.key] = d.reason
        waiting[:] = [j for j in waiting if j.key not in run.never]
        return starts
    nodes = pools[WHOLE_SITE]
    booked = {name: list(a) for name, a in allocations.items()}
    starts = []
    queue = sorted(waiting, key=lambda j: order[j.key])
    shadow = None
    for i, job in enumerate(queue):
        views = [free_view(n, booked.get(n.name, ())) for n in nodes]
        placement = place(job.spec, queue_of[job.key], views)
        if i == 0 or shadow is None:
            if placement is not None:
                starts.append((job, placement))
                for a in placement.allocations:
                    booked.setdefault(a.node, []).append(a)
                continue
            if policy == "fifo":
                break
            shadow = _shadow_time(job, queue_of[job.key], nodes, booked, running, now)
            continue
        # EASY: behind the blocked head, only what ends (by its walltime) before its start.
        walltime = job.spec.walltime_s or job.runtime
        if placement is not None and now + walltime <= shadow:
            starts.append((job, placement))
            for a in placement.allocations:
                booked.setdefault(a.node, []).append(a)
    return starts


def _shadow_time(job: SimJob, queue: QueuePolicy, nodes, booked, running, now: float) -> float:
    """The earliest time the running jobs' walltimes free room for `job` (its reservation)."""
    left = {name: list(a) for name, a in booked.items()}
    for outcome in sorted(running.values(), key=lambda o: (o.planned_end, o.key)):
        for a in outcome.allocations:
            if a in left.get(a.node, []):
                left[a.node].remove(a)
        views = [free_view(n, left.get(n.name, ())) for n in nodes]
        if place(job.spec, queue, views) is not None:
            return max(now, outcome.planned_end)
    return float("inf")


def _per_queue(running: Mapping[str, Outcome], queue_of) -> dict[str, int]:
    counts: dict[str, int] = {}
    for key in running:
        name = queue_of[key].name
        counts[name] = counts.get(name, 0) + 1
    return counts
