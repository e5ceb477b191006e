"""The local backend with real processes: backfill across pools (docs/policy.md, "Backfill
across pools")."""

from __future__ import annotations

from scheduling.backends.base import JobState
from scheduling.backends.local import LocalBackend
from scheduling.decisions.borrow import Borrowing
from scheduling.decisions.types import NodeView, QueuePolicy
from tests.unit.scheduling.local_backend.helpers import finished, request, running, state_file

HPC = QueuePolicy(name="hpc", pool="cpu", task_types=())
INVENTORY = {
    "cpu": [NodeView(name="c1", cpus=6, memory_mib=8192)],
    # Two free GPUs keep 2 cores each: 4 of its 8 cores are lent.
    "gpu": [NodeView(name="g1", cpus=8, memory_mib=16384, gpus=2)],
}


def _backend(job_root, name, rules):
    return LocalBackend(
        f"local-{name}",
        root=str(job_root / name),
        node_source=lambda alias: INVENTORY,
        borrowing_source=lambda alias: rules,
        kill_grace_s=0.5,
    )


def test_a_cpu_job_runs_on_a_gpu_nodes_idle_cores_only_where_switched_on(job_root):
    backend = _backend(job_root, "on", [Borrowing("cpu", "gpu", cpus_per_free_gpu=2)])
    backend.submit(request("own", ["sleep", "30"], queue=HPC, cpus=6, walltime_s=60))
    assert running(backend, "own").state is JobState.RUNNING  # its own pool is full
    backend.submit(request("lent", ["true"], queue=HPC, cpus=3, walltime_s=60))
    too_big = backend.submit(request("big", ["true"], queue=HPC, cpus=5, walltime_s=60))
    open_ended = backend.submit(request("open", ["true"], queue=HPC, cpus=1))

    assert finished(backend, "lent").state is JobState.SUCCEEDED
    state = state_file(backend, "lent")
    assert state["nodes"] == ["g1"] and state["queue"] == "hpc"
    assert state["alloc"] == {"cpus": 3, "gpus": 0, "memory_mib": 1024, "nodes": 1}
    assert state["note"].startswith("backfilled on g1's idle cores (pool gpu) until ")
    assert too_big.state is JobState.PENDING
    assert "not on the idle cores of gpu: none holds it" in too_big.reason
    assert open_ended.state is JobState.PENDING
    assert "only work with a walltime borrows them" in open_ended.reason

    off = _backend(job_root, "off", [])  # the switch off: it waits for its own pool
    off.submit(request("own", ["sleep", "30"], queue=HPC, cpus=6, walltime_s=60))
    waits = off.submit(request("lent", ["true"], queue=HPC, cpus=3, walltime_s=60))
    assert waits.state is JobState.PENDING and "idle cores" not in waits.reason
    for b in (backend, off):
        for key in ("own", "big", "open", "lent"):
            if b.find(key) is not None and not b.find(key).state.finished:
                b.cancel(key)
