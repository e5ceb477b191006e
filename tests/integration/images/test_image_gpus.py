"""A task in an image sees exactly its GPUs' device files, as a task on the host does
(tests/unit/scheduling/test_devices.py): real character devices made with mknod, bound into
the sandbox built over the image's root."""

from __future__ import annotations

import dataclasses
import os

import pytest

from scheduling.backends.base import JobState
from scheduling.decisions.devices import DeviceTable
from tests.conftest import in_ci
from tests.unit.scheduling.local_backend.helpers import finished, running, state_file
from tests.unit.scheduling.test_devices import BIG, CONTROL, SHOW, files_in, make_devices, seen

pytestmark = [pytest.mark.registry, pytest.mark.integration]
if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))


def test_a_task_in_an_image_sees_exactly_its_2_gpus_of_8(make, in_image, job_root):
    folder = job_root / "dev"
    make_devices(folder)
    backend = make(nodes=[BIG])
    devices = DeviceTable(files_in(folder))

    def on_gpus(image: str, key: str, command: list[str], gpus: int):
        req = in_image(image, key, command, gpus=gpus)
        return dataclasses.replace(req, devices=devices)

    # Another job holds the first GPUs: ours are not the host's 0 and 1.
    backend.submit(on_gpus("demo/tiny:1", "first", ["sleep", "30"], 3))
    assert running(backend, "first").state is JobState.RUNNING
    backend.submit(on_gpus("switchyard/base:1", "ours", ["sh", "-c", SHOW], 2))
    job = finished(backend, "ours", timeout=60)
    assert job.state is JobState.SUCCEEDED, (job.reason, backend.log("ours"))
    [held] = state_file(backend, "first")["allocations"]
    [allocation] = state_file(backend, "ours")["allocations"]
    host = allocation["gpu_indices"]
    assert len(host) == 2 and not set(host) & set(held["gpu_indices"])
    listing, files, cuda = seen(backend.log("ours"))
    assert sorted(name for name in listing if name.startswith("nvidia")) == sorted(
        [f"nvidia{host[0]}", f"nvidia{host[1]}", *CONTROL]
    )
    assert set(files) == {f"/dev/nvidia{i}" for i in host} | {f"/dev/{n}" for n in CONTROL}
    assert cuda == "0,1"
