"""Workloads for the simulator, and the site as its model (no Django)."""

from __future__ import annotations

import random

from scheduling.simulation.engine import SimJob, Site
from scheduling.sites.types import Site as SiteSpec
from scheduling.spec import Resources, TaskSpec


def site_model(spec: SiteSpec) -> Site:
    """A site's pools and queues as the simulator takes them (every node up, idle)."""
    return Site(
        pools={pool.name: tuple(pool.nodes) for pool in spec.pools},
        queues={queue.name: queue for queue in spec.queues},
    )


def _job(key, kind, queue, submit, runtime, walltime, *, cpus, gpus=0, memory_gib=4, nodes=None):
    spec = TaskSpec(
        name=key,
        project="sim",
        type=kind,
        queue=queue,
        resources=Resources(cpus=cpus, gpus=gpus, memory_mib=memory_gib * 1024, nodes=nodes),
        walltime_s=walltime,
        estimate_s=walltime,
    )
    return SimJob(key, spec, kind, queue, float(submit), float(runtime))


def r14(seed: int = 1) -> list[SimJob]:
    """The seed's validation scenario, all at once on the default site: 50 agent tasks of
    about 5 minutes, two training runs of 4 nodes x 8 GPUs, one 256-core HPC run. Runtimes
    vary with `seed` (agents 3-7 min, training 50-70 min, HPC 100-140 min); walltimes are
    what such work would ask for."""
    rng = random.Random(seed)
    jobs = [
        _job(f"agent-{i:02d}", "agent", "inference-agent", rng.uniform(0, 5),
             rng.uniform(180, 420), 900, cpus=1, memory_gib=2)
        for i in range(50)
    ]  # fmt: skip
    jobs += [
        _job(f"train-{i}", "ai-training", "training", rng.uniform(0, 5), rng.uniform(3000, 4200),
             2 * 3600, cpus=4 * 32, gpus=4 * 8, memory_gib=256, nodes=4)
        for i in range(2)
    ]  # fmt: skip
    jobs.append(
        _job("hpc-0", "hpc-simulation", "hpc", rng.uniform(0, 5), rng.uniform(6000, 8400),
             3 * 3600, cpus=256, memory_gib=64)
    )  # fmt: skip
    return jobs
