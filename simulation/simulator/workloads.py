"""Workloads for the simulator, and a site as its model (no Django).

- `launch_mix(seed)`: the launch mix alone, all at once (fits an idle default site).
- `validation_day(seed)`: the same mix arriving at 10:00 into a busy working day on the default
  site (agents, inference, training and HPC arriving from 08:00 to 18:00), just after a block
  of trainings has filled the training pool (`busy_training`), which is where the success
  criteria can tell policies apart. docs/simulation.md gives the rates.
"""

from __future__ import annotations

import random

from scheduling.decisions.order import parse_weight_schedule
from scheduling.sites.types import Site as SiteSpec
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.model import AGENT_STARTUP_S, SimJob, Site

HOUR = 3600
TASK_TYPES = ("hpc-simulation", "ai-training", "ai-inference", "agent", "sandbox")
# The project whose HPC run and training arrive together in the launch mix (the "pair").
PAIR_PROJECT = "climate"
BURST_AT = 2 * HOUR  # 10:00 on a day that starts at 08:00
DAY_HOURS = 10
# Before the mix: trainings worth this many whole training nodes (of the pool's 20), submitted
# this long before it, each ending (by its runtime) within `BUSY_ENDS_S` after the mix arrives.
BUSY_NODES = 16
BUSY_LEAD_S = 30 * 60
BUSY_ENDS_S = 20 * 60


def site_model(spec: SiteSpec) -> Site:
    """A site's pools, queues and policy as the simulator takes them (every node up, idle)."""
    return Site(
        pools={pool.name: tuple(pool.nodes) for pool in spec.pools},
        queues={queue.name: queue for queue in spec.queues},
        level_rules=spec.level_rules,
        weights={
            queue: parse_weight_schedule(windows, TASK_TYPES)
            for queue, windows in spec.weight_schedules.items()
        },
        quotas=spec.project_quotas,
        leases=spec.lease_schedules,
        startup_s={"agent": AGENT_STARTUP_S},  # as the local backend starts one
        borrowing=spec.borrowing,
    )


def job(
    key,
    kind,
    queue,
    submit,
    runtime,
    walltime,
    *,
    cpus,
    gpus=0,
    memory_gib=4,
    nodes=None,
    project="sim",
    user="sim",
    command=None,
) -> SimJob:
    spec = TaskSpec(
        name=key,
        project=project,
        command=command,
        type=kind,
        queue=queue,
        resources=Resources(cpus=cpus, gpus=gpus, memory_mib=int(memory_gib * 1024), nodes=nodes),
        walltime_s=int(walltime),
        estimate_s=int(walltime),
    )
    return SimJob(key, spec, kind, queue, float(submit), float(runtime), user)


def launch_mix(seed: int = 1, at: float = 0.0) -> list[SimJob]:
    """The launch mix, all at once (within 5 s of `at`): 50 agent tasks of about
    5 minutes, two training runs of 4 nodes x 8 GPUs, one 256-core HPC run. Runtimes vary with
    `seed` (agents 3-7 min, training 50-70 min, HPC 100-140 min); walltimes are what such work
    would ask for. One training run and the HPC run belong to one project (`PAIR_PROJECT`)."""
    rng = random.Random(seed)
    jobs = [
        job(
            f"agent-{i:02d}",
            "agent",
            "inference-agent",
            at + rng.uniform(0, 5),
            rng.uniform(180, 420),
            900,
            cpus=1,
            memory_gib=2,
            project="agents-lab",
        )
        for i in range(50)
    ]
    jobs += [
        job(
            f"train-{i}",
            "ai-training",
            "training",
            at + rng.uniform(0, 5),
            rng.uniform(3000, 4200),
            2 * HOUR,
            cpus=4 * 32,
            gpus=4 * 8,
            memory_gib=4 * 256,
            nodes=4,
            project=PAIR_PROJECT if i == 0 else "materials",
        )
        for i in range(2)
    ]
    jobs.append(
        job(
            "hpc-0",
            "hpc-simulation",
            "hpc",
            at + rng.uniform(0, 5),
            rng.uniform(6000, 8400),
            3 * HOUR,
            cpus=256,
            memory_gib=256,
            project=PAIR_PROJECT,
        )
    )
    return jobs


# Background arrivals per hour, 08:00-18:00 (Poisson).
RATES = {"agent": 60, "ai-inference": 10, "ai-training": 3, "hpc-simulation": 1.2}
PROJECTS = ("astro", "bio", "chem", "geo", "physics", "vision")


def validation_day(seed: int = 1) -> list[SimJob]:
    """A busy working day on the default site with the launch mix arriving at 10:00 (`BURST_AT`),
    when the training pool is full (`busy_training`).

    Background, from t = 0 (08:00) for `DAY_HOURS` hours: agents (1 CPU, 3-7 min), inference
    (8 CPUs and 1, 2 or 4 GPUs, 15-50 min), training (1, 2 or 4 whole 8-GPU nodes, 1-4 h,
    walltime 1.5x) and HPC (32-192 cores, 30 min-3 h, walltime 2x), at `RATES` per hour, in
    six projects. Same seed, same day.
    """
    rng = random.Random(seed * 7919 + 14)
    jobs: list[SimJob] = []
    for kind, per_hour in RATES.items():
        t, n = 0.0, 0
        while True:
            t += rng.expovariate(per_hour / HOUR)
            if t >= DAY_HOURS * HOUR:
                break
            jobs.append(_background(kind, f"bg-{kind}-{n:03d}", t, rng))
            n += 1
    return jobs + busy_training(seed, BURST_AT) + launch_mix(seed, at=BURST_AT)


def busy_training(seed: int, at: float) -> list[SimJob]:
    """Trainings that fill the training pool when the launch mix arrives at `at`: `BUSY_NODES`
    whole nodes' worth, 1 or 2 nodes each, in the background's projects in turn, submitted in
    the minute from `at - BUSY_LEAD_S`, each running until a moment in the `BUSY_ENDS_S` after
    `at` (walltime 1.5x). With the day's own trainings the pool has no room for the mix's two
    4-node trainings when they arrive, under any policy, and room frees within minutes: their
    wait says how a policy hands out the room that frees."""
    rng = random.Random(seed * 31 + 5)
    jobs: list[SimJob] = []
    left = BUSY_NODES
    while left > 0:
        nodes = min(left, rng.choice((1, 2)))
        left -= nodes
        submit = at - BUSY_LEAD_S + rng.uniform(0, 60)
        runtime = at - submit + rng.uniform(0, BUSY_ENDS_S)
        jobs.append(
            _training(
                f"busy-train-{len(jobs):02d}",
                submit,
                runtime,
                nodes,
                PROJECTS[len(jobs) % len(PROJECTS)],
            )
        )
    return jobs


def _background(kind: str, key: str, t: float, rng: random.Random) -> SimJob:
    project = rng.choice(PROJECTS)
    if kind == "agent":
        return job(
            key,
            kind,
            "inference-agent",
            t,
            rng.uniform(180, 420),
            900,
            cpus=1,
            memory_gib=2,
            project=project,
        )
    if kind == "ai-inference":
        gpus = rng.choice((1, 2, 4))
        return job(
            key,
            kind,
            "inference-agent",
            t,
            rng.uniform(900, 3000),
            HOUR,
            cpus=8,
            gpus=gpus,
            memory_gib=32,
            project=project,
        )
    if kind == "ai-training":
        nodes = rng.choices((1, 2, 4), weights=(40, 35, 25))[0]
        runtime = rng.uniform(1 * HOUR, 4 * HOUR)
        return _training(key, t, runtime, nodes, project)
    cores = rng.choice((32, 64, 128, 192))
    runtime = rng.uniform(HOUR / 2, 3 * HOUR)
    return job(
        key, kind, "hpc", t, runtime, 2 * runtime, cpus=cores, memory_gib=cores, project=project
    )


def _training(key: str, submit: float, runtime: float, nodes: int, project: str) -> SimJob:
    """A training of whole 8-GPU nodes (32 cores, 256 GiB each), walltime 1.5x its runtime."""
    return job(
        key,
        "ai-training",
        "training",
        submit,
        runtime,
        1.5 * runtime,
        cpus=32 * nodes,
        gpus=8 * nodes,
        memory_gib=256 * nodes,
        nodes=nodes,
        project=project,
    )
