"""Backfill across pools, hand-checked (docs/policy.md, "Backfill across pools")."""

from __future__ import annotations

import dataclasses

from scheduling.decisions.borrow import Borrowed, Borrowing, borrow_pass, lendable
from scheduling.decisions.place import free_view
from scheduling.decisions.reserve import Busy, Plan
from scheduling.decisions.schedule import Wait, WaitingJob
from scheduling.decisions.types import NodeAllocation, NodeView, QueuePolicy
from scheduling.spec import Resources, TaskSpec

HPC = QueuePolicy(name="hpc", pool="cpu", task_types=())
TRAIN = QueuePolicy(name="training", pool="gpu", task_types=(), allocation="whole-node")
GPU1 = NodeView("gpu001", cpus=64, memory_mib=65536, gpus=8, gpu_model="A100")
GPU2 = NodeView("gpu002", cpus=64, memory_mib=65536, gpus=8, gpu_model="A100")
# gpu001 runs a 6-GPU job with 16 cores: 48 cores and 2 GPUs free; gpu002 is idle.
TRAINING = NodeAllocation("gpu001", 16, 16384, (0, 1, 2, 3, 4, 5))
ALLOCATIONS = {"gpu001": [TRAINING]}
RULE = Borrowing("cpu", "gpu", cpus_per_free_gpu=4)


def _views():
    return [free_view(n, ALLOCATIONS.get(n.name, ())) for n in (GPU1, GPU2)]


def _job(key, cpus, walltime, *, gpus=0, seq=0, queue=HPC):
    spec = TaskSpec(
        name=key,
        project="p",
        resources=Resources(cpus=cpus, gpus=gpus, memory_mib=1024),
        walltime_s=walltime,
    )
    return WaitingJob(key, spec, queue, 0, seq)


def _borrow(jobs, *, rules=(RULE,), plans=None, running=None):
    decisions = borrow_pass(
        jobs,
        rules=rules,
        views={"gpu": _views()},
        plans=plans or {},
        running=running or {},
        now=0.0,
    )
    return {d.key: d for d in decisions}


def test_a_node_keeps_cores_for_its_free_gpus_and_lends_no_gpu():
    busy, idle = (lendable(v, RULE) for v in _views())
    assert (busy.free_cpus, busy.free_memory_mib, busy.free_gpus) == (40, 40960, ())
    assert (idle.free_cpus, idle.free_memory_mib) == (32, 32768)  # 8 free GPUs keep 32
    # By default a node keeps its own cores per GPU: an idle training node lends nothing.
    assert lendable(_views()[1], Borrowing("cpu", "gpu")).free_cpus == 0
    assert lendable(_views()[0], Borrowing("cpu", "gpu")).free_cpus == 32


def test_a_cpu_job_runs_on_the_idle_cores_until_its_walltime_and_says_so():
    out = _borrow([_job("sim", 40, 3600)])
    start = out["sim"]
    assert isinstance(start, Borrowed) and start.pool == "gpu" and start.until == 3600.0
    (a,) = start.placement.allocations
    assert (a.node, a.cpus, a.gpu_indices, a.whole_node) == ("gpu001", 40, (), False)
    assert start.placement.note == (
        "backfilled on gpu001's idle cores (pool gpu) until 1970-01-01 01:00 UTC"
    )


def test_it_never_takes_what_the_free_gpus_keep_nor_spreads_past_it():
    # 40 + 32 lendable cores in all: 73 do not fit, 72 do (over both nodes).
    out = _borrow([_job("big", 73, 60), _job("fits", 72, 60, seq=1)])
    assert isinstance(out["big"], Wait)
    assert "none holds it until its walltime ends" in out["big"].reason
    assert isinstance(out["fits"], Borrowed)
    assert sum(a.cpus for a in out["fits"].placement.allocations) == 72


def test_it_ends_before_the_lenders_reservation_or_leaves_it_intact():
    # The training pool reserved gpu002 (whole) from t=300 for its next training.
    plan = Plan((GPU1, GPU2), [Busy(TRAINING, 300.0)], now=0.0)
    spec = TaskSpec(name="t", project="p", resources=Resources(cpus=64, gpus=8, memory_mib=1024))
    views = {v.name: v for v in _views()}
    held = plan.make("next", spec, TRAIN, 3600.0, {"gpu002": views["gpu002"]})
    assert held is not None and held.nodes == ("gpu002",) and held.at == 300.0
    out = _borrow(
        [_job("long", 30, 7200), _job("short", 30, 200, seq=1)],
        plans={"gpu": plan},
    )
    # The long one may not sit on gpu002 past the reservation's start: it goes beside the
    # running job on gpu001, whose cores the reservation does not need.
    assert out["long"].placement.allocations[0].node == "gpu001"
    # What is left on gpu001 (10 cores) is too little; the short one ends before 300.
    assert out["short"].placement.allocations[0].node == "gpu002"
    # Both starts are in the plan: a later reservation counts them.
    assert len(plan._started) == 2


def test_gpu_work_and_work_with_no_walltime_never_borrow():
    out = _borrow([_job("gpu", 4, 60, gpus=1), _job("open", 4, None)])
    assert "gpu" not in out
    assert isinstance(out["open"], Wait)
    assert "only work with a walltime borrows them" in out["open"].reason


def test_only_the_pools_switched_on_borrow_and_queues_keep_their_maximum():
    other = QueuePolicy(name="other", pool="elsewhere", task_types=())
    capped = QueuePolicy(name="hpc", pool="cpu", task_types=(), max_concurrency=1)
    out = _borrow(
        [_job("a", 4, 60, queue=other), _job("b", 4, 60, queue=capped)], running={"hpc": 1}
    )
    assert out == {}
    assert _borrow([_job("a", 4, 60)], rules=()) == {}


def test_jobs_take_the_lent_cores_in_priority_then_submit_order():
    late, early = _job("late", 40, 60, seq=2), _job("early", 40, 60, seq=1)
    urgent = dataclasses.replace(_job("urgent", 40, 60, seq=3), priority=5)
    out = _borrow([late, early, urgent])
    assert out["urgent"].placement.allocations[0].node == "gpu001"
    assert isinstance(out["early"], Wait)  # 32 left on gpu002
    assert isinstance(out["late"], Wait)
    out = _borrow([late, early])
    assert isinstance(out["early"], Borrowed) and isinstance(out["late"], Wait)
