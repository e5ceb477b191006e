"""The simulator's fast pass decides exactly what one `schedule_pass` over every waiting job
decides: random small sites (several pools and queues, oversubscription, whole nodes,
max_concurrency, a preemptible pool, moving levels, quotas, a lease, a node failure, plans by
predicted runtimes, backfill across pools) run under both, and every start, end, node and
refusal must agree. The reference makes every reservation anew where the fast pass takes
one the last plan made again (`reserve.Made`)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest

from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.levels import HIGH, LOW, MEDIUM, LevelRule
from scheduling.decisions.order import OVERDUE, priority_value, weight_at
from scheduling.decisions.place import place
from scheduling.decisions.reserve import Plan
from scheduling.decisions.schedule import Fail, Start, WaitingJob, schedule_pass
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.sites.types import LeaseTemplate, QuotaTemplate
from scheduling.spec import Resources, TaskSpec
from simulation.simulator import engine
from simulation.simulator.baselines import ONE_QUEUE, Baseline, Room, _common
from simulation.simulator.engine import simulate
from simulation.simulator.model import Failure, SimJob, Site
from simulation.simulator.state import WHOLE_SITE
from simulation.simulator.switchyard import SitePolicy
from simulation.simulator.traces import read_swf, swf_site

GIB = 1024


class OneCall(SitePolicy):
    """The reference: every waiting job of the pool to one schedule_pass call, every pass, with
    the pool's reservations."""

    def _pass(self, pool, now):
        sim, site = self.sim, self.sim.site
        self.fresh.pop(pool, None)
        # The same reservations as the fast pass keeps (schedule_pass decides with them).
        plan = self._plan(pool, sim.pool_nodes(pool), now, fresh=pool not in sim.freed)
        sim.freed.discard(pool)
        minute, shares, offered = self._minute(now), {}, []
        for job in list(sim.waiting.values()):
            if self.pool_of_queue[job.queue] != pool:
                continue
            if job.queue not in shares:
                shares[job.queue] = self._shares(job.queue, now)
            value = priority_value(
                level=OVERDUE if job.key in self.overdue else self.level[job.key],
                weight=weight_at(site.weights.get(job.queue, ()), job.type, minute),
                share=shares[job.queue].get(job.project, 1.0),
                borrowed=job.key in self.cohorts.borrowed,
            )
            offered.append(
                WaitingJob(
                    job.key,
                    job.spec,
                    site.queues[job.queue],
                    value,
                    self.seq[job.key],
                    runtime_s=self._planned(job),
                )
            )
        decisions = schedule_pass(
            offered,
            pools={pool: list(sim.pool_nodes(pool))},
            allocations=sim.allocations,
            running=sim.per_queue,
            drained=set(sim.down),
            now=now,
            plans={pool: plan},
            backfill=site.backfill,
        )
        for d in decisions:
            job = sim.waiting[d.key]
            if isinstance(d, Start):
                self._start(job, d.placement, now)
                self.since[pool].add(job.key)
            elif isinstance(d, Fail):
                sim.refuse(d.key, d.reason)
                self._release(job, now)
            else:
                continue
            self._unbucket(job)


def _site_and_jobs(seed: int):
    rng = random.Random(seed)
    cpu = tuple(
        NodeView(
            f"c{i}",
            cpus=rng.choice((4, 8, 16)),
            memory_mib=rng.choice((16, 32)) * GIB,
            switch=rng.choice(("s1", "s2")),
        )
        for i in range(rng.randint(2, 4))
    )
    gpu = tuple(
        NodeView(
            f"g{i}",
            cpus=rng.choice((8, 16)),
            memory_mib=64 * GIB,
            gpus=rng.choice((2, 4)),
            gpu_model=rng.choice(("a", "b")),
            switch="s3",
        )
        for i in range(rng.randint(2, 3))
    )
    agents = tuple(
        NodeView(f"a{i}", cpus=rng.choice((4, 8)), memory_mib=16 * GIB) for i in range(2)
    )
    queues = {
        "hpc": QueuePolicy("hpc", "cpu", (), max_concurrency=rng.choice((None, 1, 3))),
        "hpc2": QueuePolicy("hpc2", "cpu", (), cpu_oversubscription=rng.choice((1, 2, 4))),
        "wn": QueuePolicy(
            "wn", "gpu", (), allocation="whole-node", max_concurrency=rng.choice((None, 2))
        ),
        "tr": QueuePolicy("tr", "gpu", ()),
        "ag": QueuePolicy(
            "ag", "ag", (), preemptible=True, cpu_oversubscription=rng.choice((1, 4))
        ),
        "inf": QueuePolicy("inf", "ag", ()),
    }
    # A bound on waiting in some queues, from a stream of its own (the draws below unchanged).
    bounds = random.Random(seed + 100_000)
    queues = {
        name: dataclasses.replace(q, wait_bound_s=bounds.choice((None, None, 60, 150)))
        for name, q in queues.items()
    }
    rules = (
        LevelRule(
            "agent", start=HIGH, step=-1, every_s=rng.choice((5, 20)), limit=LOW, repeat=True
        ),
        LevelRule(
            "ai-inference", start=LOW, step=+1, every_s=rng.choice((7, 30)), limit=HIGH, repeat=True
        ),
        LevelRule("hpc-simulation", start=LOW, step=+1, every_s=40, limit=HIGH, repeat=True),
        LevelRule("ai-training", start=MEDIUM, step=+1, every_s=25, limit=HIGH),
    )
    leases = ()
    if rng.random() < 0.6:
        leases = (
            LeaseTemplate(
                rng.choice(("gpu", "cpu")),
                rng.choice(("hpc", "tr")),
                1,
                f"08:0{rng.randint(0, 4)}",
                rng.choice((60, 150, 400)),
            ),
        )
    site = Site(
        pools={"cpu": cpu, "gpu": gpu, "ag": agents},
        queues=queues,
        level_rules=rules,
        quotas=(
            (
                QuotaTemplate(
                    "tr",
                    "gpus",
                    rng.choice((2, 4)),
                    borrowing_limit=rng.choice((0, 2, 4)),  # lending: borrowed work goes last
                    lending_limit=rng.choice((None, 1)),
                ),
            )
            if rng.random() < 0.6
            else ()
        ),
        leases=leases,
        shares={"p1": 2.0, "p2": 1.0},
        half_life_s=300,
        preempt_after_s=rng.choice((3, 10)),
    )
    kinds = [
        ("hpc-simulation", "hpc"),
        ("hpc-simulation", "hpc2"),
        ("ai-training", "wn"),
        ("ai-training", "tr"),
        ("agent", "ag"),
        ("ai-inference", "inf"),
    ]
    jobs = []
    for i in range(rng.randint(15, 50)):
        kind, queue = rng.choice(kinds)
        if queue in ("hpc", "hpc2"):
            res = Resources(
                cpus=rng.choice((1, 2, 4, 8, 12, 20)),
                memory_mib=rng.choice((1, 8)) * GIB,
                nodes=rng.choice((None, None, 1, 2)),
            )
        elif queue == "wn":
            res = Resources(
                cpus=rng.choice((4, 8)),
                gpus=rng.choice((0, 1, 4)),
                memory_mib=8 * GIB,
                nodes=rng.choice((None, 1, 2)),
            )
        elif queue == "tr":
            res = Resources(
                cpus=rng.choice((1, 2)),
                gpus=rng.choice((1, 2, 3)),
                memory_mib=4 * GIB,
                gpu_type=rng.choice((None, "a", "b")),
            )
        else:
            res = Resources(cpus=rng.choice((1, 2, 4)), memory_mib=GIB)
        runtime = rng.choice((5, 10, 30, 60, 120))
        spec = TaskSpec(
            name=f"j{i}",
            project=rng.choice(("p1", "p2", "p3")),
            resources=res,
            walltime_s=rng.choice((runtime, 2 * runtime)),
            priority=rng.choice(("normal", "low")),
            # Runs of the same command are predicted from each other: plans use the
            # predictions, and correct them as jobs outlive them (docs/predictions.md).
            command=("run", rng.choice(("a", "b"))),
        )
        jobs.append(
            SimJob(f"j{i:02d}", spec, kind, queue, float(rng.randint(0, 300)), float(runtime))
        )
    failures = []
    if rng.random() < 0.5:
        node = rng.choice([n.name for nodes in site.pools.values() for n in nodes])
        failures.append(Failure(node, float(rng.randint(1, 200)), float(rng.randint(5, 100))))
    # Backfill across pools in most sites, drawn apart so that the rest stays as it was.
    other = random.Random(seed + 10_000)
    if other.random() < 0.7:
        keep = (None, 0, 1, 2)
        rules = [Borrowing("cpu", "gpu", other.choice(keep)), Borrowing("cpu", "ag", 0)]
        if other.random() < 0.5:
            rules.append(Borrowing("ag", "cpu"))
        site = dataclasses.replace(site, borrowing=tuple(other.sample(rules, len(rules))))
    return jobs, site, failures


def _digest(run):
    return (
        {k: (o.start, o.end, o.allocations, o.attempts) for k, o in run.outcomes.items()},
        dict(run.never),
        [(s.key, s.start, s.end, s.ended, s.allocations) for s in run.spans],
    )


@pytest.mark.parametrize("block", range(4))
def test_the_fast_pass_decides_as_one_schedule_pass_over_every_waiting_job(block, monkeypatch):
    for seed in range(block * 40, block * 40 + 40):
        jobs, site, failures = _site_and_jobs(seed)
        fast = _digest(simulate(jobs, site, "switchyard", failures=failures))
        with monkeypatch.context() as m:
            m.setattr(engine, "SitePolicy", OneCall)
            m.setattr(Plan, "kept", lambda self: {})  # no reservation taken again
            reference = _digest(simulate(jobs, site, "switchyard", failures=failures))
        assert fast == reference, f"seed {seed}"


class NaiveOneQueue(Baseline):
    """The reference for FIFO and EASY: every pass from scratch, every waiting job in submit
    order, the head's reservation computed anew."""

    def arrive(self, job, now):
        super().arrive(job, now)
        self.sim.dirty.add(WHOLE_SITE)

    def _schedule(self, now):
        sim = self.sim
        sim.dirty.clear()
        sim.freed.discard(WHOLE_SITE)
        views = {v.name: v for v in sim.views(WHOLE_SITE)}
        room = Room(views.values())
        queue = sorted(sim.waiting.values(), key=lambda j: sim.order[j.key])
        for i, job in enumerate(queue):
            placement = place(job.spec, ONE_QUEUE, list(views.values()))
            if placement is not None:
                self._start(job, placement, now, views, room, {})
                continue
            if not self.easy:
                return
            shadow, spare = self._reservation(job, views, now, room)
            self.held_until = shadow
            for other in queue[i + 1 :]:
                placement = place(other.spec, ONE_QUEUE, list(views.values()))
                if placement is None:
                    continue
                if now + (other.spec.walltime_s or other.runtime) <= shadow:
                    self._start(other, placement, now, views, room, spare)
                    continue
                both = [_common(views[name], v) for name, v in spare.items()]
                if (extra := place(other.spec, ONE_QUEUE, both)) is not None:
                    self._start(other, extra, now, views, room, spare)
            return


@pytest.mark.parametrize("policy", ["fifo", "easy"])
def test_fifo_and_easy_decide_as_a_pass_from_scratch_over_every_waiting_job(policy, monkeypatch):
    for seed in range(120):
        jobs, site, failures = _site_and_jobs(seed)
        fast = _digest(simulate(jobs, site, policy, failures=failures))
        with monkeypatch.context() as m:
            m.setattr(engine, "Baseline", NaiveOneQueue)
            reference = _digest(simulate(jobs, site, policy, failures=failures))
        assert fast == reference, f"{policy}, seed {seed}"


TRACES = Path(__file__).resolve().parents[3].parent / "shared" / "traces"


def test_a_reservation_taken_again_from_the_last_plan_is_the_one_made_anew(monkeypatch):
    """The first 4,000 jobs of Lublin's SWF model, where most reservations are taken again
    (jobs ending as planned leave them where they were) and some must not be (room a job
    started beside one still holds at its start, reservations made before it that moved):
    every start, end and node agree with a run that makes each anew."""
    jobs = read_swf(TRACES / "lublin_256.swf", limit=4000)
    taken: list[str] = []
    add = Plan._add

    def counted(self, made, shadow):
        if self._earlier.get(made.reservation.key) is made:
            taken.append(made.reservation.key)
        return add(self, made, shadow)

    with monkeypatch.context() as m:
        m.setattr(Plan, "_add", counted)
        kept = _digest(simulate(jobs, swf_site(), "switchyard"))
    assert len(taken) > 1000, "too few reservations taken again to tell"
    with monkeypatch.context() as m:
        m.setattr(Plan, "kept", lambda self: {})
        anew = _digest(simulate(jobs, swf_site(), "switchyard"))
    assert kept == anew


def test_a_waiting_job_the_pool_shrank_under_is_refused_behind_the_reservations(monkeypatch):
    """A lease takes a pool's idle node while a job asking all three of its nodes waits behind
    two that hold its reservations: the job can never start on the pool as it is now, and
    one pass over every waiting job refuses it at once. The fast pass must offer it although
    the room holds it not (the shapes that fit not even the emptied pool), and not leave it
    waiting for the lease to end."""
    site = Site(
        pools={
            "cpu": tuple(NodeView(f"c{i}", cpus=8, memory_mib=16 * GIB) for i in range(3)),
            "other": (NodeView("o0", cpus=8, memory_mib=16 * GIB),),
        },
        queues={
            "q": QueuePolicy(name="q", pool="cpu", task_types=()),
            "o": QueuePolicy(name="o", pool="other", task_types=()),
        },
        leases=(LeaseTemplate("cpu", "o", 1, "08:01", 1000),),
        start_minute=8 * 60,
    )

    def job(key: str, cpus: int, runtime: int) -> SimJob:
        spec = TaskSpec(
            name=key,
            project="p",
            resources=Resources(cpus=cpus, memory_mib=GIB),
            walltime_s=runtime,
        )
        return SimJob(key, spec, "hpc-simulation", "q", 0, runtime)

    # 1r and 2r hold c0 and c1 until 3000, 3a and 4b (16 CPUs) reserve after them, 5x asks 24
    # (keys in submit order: jobs that arrive together are taken by key).
    jobs = [job("1r", 8, 3000), job("2r", 8, 3000), job("3a", 16, 100), job("4b", 16, 100)]
    jobs.append(job("5x", 24, 100))
    fast = simulate(jobs, site, "switchyard")
    assert fast.leases == [(60.0, 1060.0, ("c2",))]
    assert "can ever hold" in fast.never.get("5x", "") and "5x" not in fast.outcomes
    with monkeypatch.context() as m:
        m.setattr(engine, "SitePolicy", OneCall)
        reference = simulate(jobs, site, "switchyard")
    assert _digest(fast) == _digest(reference)
