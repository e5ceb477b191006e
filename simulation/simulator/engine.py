"""A discrete-event simulator of the site: arrivals, starts, ends, level ticks, preemptions,
leases and node failures in virtual time, scheduled by the same pure decisions the live
engine and the local backend call (docs/simulation.md).

Plain Python, no Django: the site is decision values (`NodeView`, `QueuePolicy`, `LevelRule`,
…), a job is a `TaskSpec` with a queue, a submit time and how long it really runs. Policies:

- `fifo`: one undifferentiated queue over the whole site in submit order; the first job that
  does not fit stops everyone behind it.
- `easy`: EASY backfill over the same single queue: the first waiting job gets a reservation
  at the earliest time the running jobs' walltimes free room for it; a job behind it may start
  now if it fits now and either ends (by its walltime) before then or leaves the reserved room
  alone.
- `switchyard`: the site's queues and pools with its whole policy: admission against quotas,
  levels, time-of-day weights and fair share in the order, `schedule_pass` placing each job as
  the local backend does, preemption by `whom_to_preempt`, daily leases by `lend`.

The loop: take every event of one moment, then run the policy's pass on the pools those
events touched (nothing else can start: a pass leaves every waiting job not fitting).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence

from scheduling.decisions.types import NodeView
from simulation.simulator.baselines import Baseline
from simulation.simulator.model import POLICIES, Failure, Run, SimJob, Site
from simulation.simulator.state import ARRIVE, END, FAIL, REPAIR, Sim
from simulation.simulator.switchyard import SitePolicy

__all__ = ["POLICIES", "simulate"]

# Nothing running, nothing to arrive, and nothing started for two days: the loop stops.
IDLE_GIVE_UP_S = 2 * 24 * 3600.0


def simulate(
    jobs: Iterable[SimJob],
    site: Site,
    policy: str,
    *,
    failures: Sequence[Failure] = (),
    progress: Callable[[int, int], None] | None = None,
    record_room: bool = False,
) -> Run:
    """Run `jobs` on `site` under `policy`; `progress(done, total)` is called now and then.
    With `record_room`, each outcome says whether its pool could start it when it arrived
    (one more placement per arrival)."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    jobs = sorted(jobs, key=lambda j: (j.submit, j.key))
    sim = Sim(jobs, site, policy)
    sim.record_room = record_room
    rules = SitePolicy(sim) if policy == "switchyard" else Baseline(sim, easy=policy == "easy")
    for job in jobs:
        sim.at(job.submit, ARRIVE, job.key)
    for failure in failures:
        if failure.node not in sim.nodes:
            raise ValueError(f"failures: no node {failure.node!r} in the site")
        sim.at(failure.at, FAIL, failure.node)
        sim.at(failure.at + failure.down_s, REPAIR, failure.node)
    total, step = len(jobs), max(1, len(jobs) // 100)
    reported = 0
    arrivals, last_change = len(jobs), 0.0
    while sim.events and sim.left > 0:
        now = sim.events[0][0]
        if not sim.running and not arrivals and now - last_change > IDLE_GIVE_UP_S:
            break  # what waits now waits for good: only daily leases would come round
        if sim.running or sim.events[0][1] in (END, ARRIVE):
            last_change = now
        while sim.events and sim.events[0][0] == now:
            _, kind, _, key, gen = heapq.heappop(sim.events)
            if kind == END:
                if key in sim.running and gen == sim.attempt[key]:
                    rules.ended(sim.stop(key, now, "done"), now)
            elif kind == ARRIVE:
                arrivals -= 1
                rules.arrive(sim.jobs[key], now)
            elif kind in (FAIL, REPAIR):
                _node_event(sim, rules, key, now, down=kind == FAIL)
            else:
                rules.event(kind, key, now)
        if sim.dirty:
            sim.run.passes += 1
            rules.schedule(now)
        done = total - sim.left
        if progress is not None and done - reported >= step:
            reported = done
            progress(done, total)
    for key in sim.waiting:
        sim.run.never.setdefault(key, "never started: nothing left that would free room")
        sim.run.never_types[key] = sim.jobs[key].type
    if progress is not None:
        progress(total, total)
    return sim.run


def _node_event(sim: Sim, rules, name: str, now: float, *, down: bool) -> None:
    if down:
        sim.down.add(name)
        for key in sim.holders(name):
            job = sim.stop(key, now, "lost")
            rules.requeued(job, now, "lost")
    else:
        sim.down.discard(name)
    node = sim.nodes[name]
    sim.set_node(
        NodeView(
            node.name,
            node.cpus,
            node.memory_mib,
            node.gpus,
            gpu_model=node.gpu_model,
            switch=node.switch,
            available=not down,
            available_until=node.available_until,
        )
    )
