"""A multi-node GPU job on the local backend: all its ranks in one sandbox with the device
files of every node's GPUs it holds, each rank's CUDA_VISIBLE_DEVICES naming its own node's
GPUs as CUDA counts them there (docs/security.md, Devices). Real bubblewrap, fake device
files of their own numbers, and the stand-in `nvidia-smi -L` (tests/fixtures/nvidia-smi)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from scheduling.backends.base import JobState
from scheduling.decisions.devices import DeviceFiles, DeviceTable, job_devices
from scheduling.decisions.storage import JobStorage, Mount
from scheduling.decisions.types import NodeView
from tests.unit.scheduling.local_backend.helpers import finished, request, running, state_file
from tests.unit.scheduling.test_devices import (
    FIXTURES,
    NVIDIA_SMI,
    files_in,
    make_devices,
    with_devices,
)
from tests.unit.scheduling.test_local_ranks import rank_lines

NODES = [NodeView(f"g{n}", cpus=16, memory_mib=65536, gpus=8) for n in (1, 2)]
# Each rank: its CUDA_VISIBLE_DEVICES, then what nvidia-smi lists in the sandbox.
SHOW = f'echo "cuda=$CUDA_VISIBLE_DEVICES"; {NVIDIA_SMI} -L'


def minor_of(path: Path) -> int:
    return os.minor(os.stat(path).st_rdev)


def test_each_rank_of_a_2_node_job_sees_its_own_nodes_gpus_and_no_other_jobs(make, job_root):
    folder = job_root / "dev"
    make_devices(folder, nodes=("g1", "g2"))  # g1's nvidia0-7: minors 0-7; g2's: 8-15
    devices = DeviceTable(files_in(folder, "{node}/nvidia{index}"))
    backend = make(NODES)
    # Another job holds three of g1's GPUs: ours there are not its first ones.
    backend.submit(with_devices(request("first", ["sleep", "30"], gpus=3), devices))
    assert running(backend, "first").state is JobState.RUNNING
    base = request("ours", ["sh", "-c", SHOW], cpus=2, gpus=4)
    spec = dataclasses.replace(
        base.spec, resources=dataclasses.replace(base.spec.resources, nodes=2)
    )
    tools = JobStorage(mounts=(Mount(str(FIXTURES), read_only=True, owner="site"),))
    backend.submit(with_devices(dataclasses.replace(base, spec=spec, storage=tools), devices))
    job = finished(backend, "ours", timeout=30)
    log = backend.log("ours")
    assert job.state is JobState.SUCCEEDED, (job.reason, log)
    [held] = state_file(backend, "first")["allocations"]
    allocations = state_file(backend, "ours")["allocations"]
    assert sorted(a["node"] for a in allocations) == ["g1", "g2"], allocations
    others = {minor_of(folder / held["node"] / f"nvidia{i}") for i in held["gpu_indices"]}
    ours = {
        a["node"]: [minor_of(folder / a["node"] / f"nvidia{i}") for i in a["gpu_indices"]]
        for a in allocations
    }
    assert [len(m) for m in ours.values()] == [2, 2] and not others & {
        m for ms in ours.values() for m in ms
    }
    expected_listing = [
        f"GPU {at}: NVIDIA H200 (UUID: GPU-5f3e2b1a-9c4d-4e8f-a6b7-{minor:012x})"
        for at, minor in enumerate(sorted(m for ms in ours.values() for m in ms))
    ]
    for rank, allocation in enumerate(allocations):
        lines = rank_lines(log, rank)
        cuda = next(line for line in lines if line.startswith("cuda=")).removeprefix("cuda=")
        listed = [line for line in lines if line.startswith("GPU ")]
        # The job's four GPUs, numbered from 0 by minor number, none of the other job's.
        assert listed == expected_listing, log
        # The rank's CUDA_VISIBLE_DEVICES picks, of those, exactly its own node's two.
        picked = {int(listed[int(at)].rsplit("-", 1)[1].rstrip(")"), 16) for at in cuda.split(",")}
        assert picked == set(ours[allocation["node"]]), (rank, cuda, log)


def test_the_job_files_of_every_allocation_are_bound_once_ordered_by_minor_number():
    files = DeviceFiles("/d/{node}/nvidia{index}", ("/d/nvidiactl",))
    minors = {"/d/a/nvidia5": 5, "/d/a/nvidia6": 6, "/d/b/nvidia0": 8, "/d/b/nvidia1": 9}
    got = job_devices(DeviceTable(files), [("b", (0, 1)), ("a", (6, 5))], minors.get)
    assert got.binds == (
        ("/d/a/nvidia5", "/dev/nvidia5", "GPU 5 of node a"),
        ("/d/a/nvidia6", "/dev/nvidia6", "GPU 6 of node a"),
        ("/d/b/nvidia0", "/dev/nvidia8", "GPU 0 of node b"),
        ("/d/b/nvidia1", "/dev/nvidia9", "GPU 1 of node b"),
        ("/d/nvidiactl", "/dev/nvidiactl", "control device of node b"),
    )
    assert got.visible == ((2, 3), (0, 1))
    # No GPUs, or virtual ones: nothing bound, nothing visible.
    assert job_devices(DeviceTable(), [("a", (0,))], minors.get).binds == ()
    none = job_devices(DeviceTable(files), [("a", ())], minors.get)
    assert (none.binds, none.visible) == ((), ((),))
