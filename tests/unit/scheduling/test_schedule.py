"""The pure scheduling pass on the default site: order, backfill, limits, and why jobs wait."""

from __future__ import annotations

from scheduling.decisions.schedule import Fail, Start, Wait, WaitingJob, schedule_pass
from scheduling.decisions.types import NodeAllocation
from scheduling.sites import default_site
from scheduling.spec import Resources, TaskSpec

SITE = default_site()
QUEUES = SITE.queues_by_name()
POOLS = SITE.nodes_by_pool()
GIB = 1024


def job(key: str, queue: str = "hpc", *, cpus=1, gpus=0, nodes=None, memory=GIB, **kw):
    spec = TaskSpec(
        name=key,
        project="p",
        resources=Resources(cpus=cpus, gpus=gpus, nodes=nodes, memory_mib=memory),
        walltime_s=600,
    )
    return WaitingJob(key=key, spec=spec, queue=QUEUES[queue], **kw)


def run(jobs, **kw):
    kw.setdefault("allocations", {})
    kw.setdefault("running", {})
    return schedule_pass(jobs, pools=POOLS, **kw)


def test_jobs_start_in_priority_then_submit_order():
    decisions = run([job("b", seq=2), job("a", seq=1), job("urgent", seq=3, priority=5)])
    assert [d.key for d in decisions] == ["urgent", "a", "b"]
    assert all(isinstance(d, Start) for d in decisions)


def test_a_job_that_does_not_fit_does_not_block_smaller_ones_behind_it():
    # cpu-hpc has 5 × 64 cores: the first job takes 4 whole nodes' worth, the second cannot
    # fit beside it, the third (small) backfills.
    decisions = run(
        [job("big", cpus=256, seq=1), job("too-big", cpus=128, seq=2), job("small", cpus=8, seq=3)]
    )
    kinds = {d.key: type(d) for d in decisions}
    assert kinds == {"big": Start, "too-big": Wait, "small": Start}
    wait = next(d for d in decisions if d.key == "too-big")
    assert wait.reason == "waiting for resources in pool cpu-hpc (cpus=128, memory=1024 MiB)"


def test_live_allocations_count():
    busy = {
        n.name: [NodeAllocation(node=n.name, cpus=64, memory_mib=GIB)] for n in POOLS["cpu-hpc"]
    }
    [decision] = run([job("a")], allocations=busy)
    assert isinstance(decision, Wait)


def test_a_request_no_node_can_hold_fails_at_once_saying_why():
    [decision] = run([job("huge", memory=4096 * GIB)])
    assert isinstance(decision, Fail)
    assert decision.reason.startswith("no node of pool cpu-hpc can ever hold this request")
    assert "its largest node has 64 cpus, 524288 MiB, 0 GPUs" in decision.reason


def test_a_queue_at_its_concurrency_limit_holds_the_job():
    [decision] = run([job("a", "inference-agent")], running={"inference-agent": 500})
    assert decision == Wait("a", "queue inference-agent runs its maximum of 500 jobs")


def test_drained_nodes_are_skipped_and_named():
    drained = {n.name: "maintenance" for n in POOLS["cpu-hpc"]}
    [decision] = run([job("a")], drained=drained)
    assert isinstance(decision, Wait)
    assert "drained or down: cpu001, cpu002, cpu003, cpu004, cpu005" in decision.reason


def test_whole_node_training_takes_whole_nodes_and_never_shares_gpus():
    decisions = run([job(f"t{i}", "training", gpus=8, cpus=8, nodes=1, seq=i) for i in range(21)])
    started = [d for d in decisions if isinstance(d, Start)]
    assert len(started) == 20  # one per node of the 20-node pool
    nodes = [d.placement.nodes[0] for d in started]
    assert len(set(nodes)) == 20
    assert isinstance(decisions[-1], Wait)


def test_sandboxed_jobs_fail_without_a_sandbox_and_others_still_start():
    decisions = run(
        [job("agent", "inference-agent", sandboxed=True, seq=1), job("hpc", seq=2)],
        sandbox_missing="no bwrap",
    )
    assert decisions[0] == Fail("agent", "no bwrap")
    assert isinstance(decisions[1], Start)
