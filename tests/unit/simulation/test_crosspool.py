"""Backfill across pools in the simulator's site policy, checked by hand (docs/policy.md,
"Backfill across pools")."""

from __future__ import annotations

import dataclasses

from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.types import NodeView, QueuePolicy
from scheduling.spec import Resources, TaskSpec
from simulation.simulator.engine import simulate
from simulation.simulator.model import SimJob, Site

SITE = Site(
    pools={
        "cpu": (NodeView("c1", cpus=4, memory_mib=16384),),
        "gpu": (NodeView("g1", cpus=8, memory_mib=16384, gpus=2),),
    },
    queues={
        "hpc": QueuePolicy(name="hpc", pool="cpu", task_types=()),
        "train": QueuePolicy(name="train", pool="gpu", task_types=(), allocation="whole-node"),
    },
)
ON = dataclasses.replace(SITE, borrowing=(Borrowing("cpu", "gpu", cpus_per_free_gpu=2),))


def _job(key, submit, cpus, runtime, walltime, *, queue="hpc", gpus=0) -> SimJob:
    spec = TaskSpec(
        name=key,
        project="p",
        resources=Resources(cpus=cpus, gpus=gpus, memory_mib=1024),
        walltime_s=walltime,
    )
    return SimJob(
        key, spec, "hpc-simulation" if queue == "hpc" else "ai-training", queue, submit, runtime
    )


def _runs(site, jobs):
    run = simulate(jobs, site, "switchyard")
    return {k: (o.start, o.end, o.allocations[0].node) for k, o in sorted(run.outcomes.items())}


def test_a_waiting_cpu_job_runs_on_the_gpu_pools_idle_cores_only_when_switched_on():
    jobs = [_job("A", 0, 4, 100, 100), _job("B", 1, 4, 50, 60)]
    assert _runs(SITE, jobs)["B"] == (100, 150, "c1")  # waits for its own pool
    # 4 of g1's 8 cores are kept for its two free GPUs: the other 4 are lent until t=61.
    assert _runs(ON, jobs)["B"] == (1, 51, "g1")
    small_pool = dataclasses.replace(
        ON, pools={**ON.pools, "cpu": (NodeView("c1", cpus=6, memory_mib=16384),)}
    )
    too_big = [_job("A", 0, 6, 100, 100), _job("B", 1, 5, 50, 60)]
    assert _runs(small_pool, too_big)["B"] == (100, 150, "c1")  # more than g1 lends


def test_it_borrows_only_what_ends_before_the_lenders_reservation():
    # g1 trains until 30; T2 needs both nodes whole and is reserved them from 30. g2 is idle
    # now and lends 4 of its 8 cores (4 kept for its two free GPUs), until 30 only.
    two = dataclasses.replace(
        ON,
        pools={
            **ON.pools,
            "gpu": (*ON.pools["gpu"], NodeView("g2", cpus=8, memory_mib=16384, gpus=2)),
        },
    )
    jobs = [
        _job("T1", 0, 8, 30, 30, queue="train", gpus=2),
        _job("T2", 1, 16, 30, 30, queue="train", gpus=4),
        _job("A", 0, 4, 100, 100),
        _job("long", 2, 2, 10, 100),  # its walltime would reach 30: not before T2 ends
        _job("short", 3, 2, 10, 20),  # ends by 23: borrowed
    ]
    out = _runs(two, jobs)
    assert out["short"] == (3, 13, "g2")
    assert out["long"] == (60, 70, "g1")  # T2 done, nothing reserved: borrowed (c1: 100)
    assert out["T2"][:2] == (30, 60)  # its reservation held
