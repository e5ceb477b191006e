"""What the task descriptor's tests share: the full example, a minimal descriptor changed one
thing at a time, and readers of the errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from scheduling.descriptor import (
    DescriptorError,
    FieldError,
    parse_document,
    parse_task,
)
from scheduling.spec import Resources, TaskSpec

MAX = 256 * 1024

FULL_YAML = """\
apiVersion: switchyard/v1
kind: Task                 # the docs example, every field
name: md-run-7
project: materials
type: hpc-simulation
queue: hpc
resources: {nodes: 2, cpus: 256, memory: 512Gi, gpus: 0, gpu_type: null}
walltime: 48h
estimate: 40h
command: ["mpirun", "-n", "256", "lmp", "-in", "in.lj"]
image: null
env: {OMP_NUM_THREADS: "1", LAMMPS_POTENTIALS: /shared/pot}
depends_on: [42]             # a single task depends on existing tasks by id
retry_count: 2
fail_action: abort
wait_timeout: 6h
trigger: {file: /shared/materials/READY}
inputs: [/shared/materials/in.lj]
priority: normal
"""

FULL_SPEC = TaskSpec(
    name="md-run-7",
    project="materials",
    resources=Resources(cpus=256, memory_mib=512 * 1024, gpus=0, nodes=2, gpu_type=None),
    type="hpc-simulation",
    queue="hpc",
    walltime_s=48 * 3600,
    estimate_s=40 * 3600,
    command=("mpirun", "-n", "256", "lmp", "-in", "in.lj"),
    script=None,
    image=None,
    env=(("LAMMPS_POTENTIALS", "/shared/pot"), ("OMP_NUM_THREADS", "1")),
    depends_on=(),
    depends_on_ids=(42,),
    retry_count=2,
    fail_action="abort",
    wait_timeout_s=6 * 3600,
    trigger_file="/shared/materials/READY",
    inputs=("/shared/materials/in.lj",),
    priority="normal",
)

# A minimal valid descriptor; tests change one thing at a time.
BASE: dict[str, Any] = {
    "apiVersion": "switchyard/v1",
    "kind": "Task",
    "name": "train-1",
    "project": "ml",
    "command": ["python", "train.py"],
}


def doc(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is _DROP:
            data.pop(key, None)
        else:
            data[key] = value
    return data


_DROP = object()


def errors_of(data: Any) -> list[FieldError]:
    with pytest.raises(DescriptorError) as info:
        parse_task(data)
    return info.value.errors


def the_error(data: Any, field: str | None) -> FieldError:
    matching = [e for e in errors_of(data) if e.field == field]
    assert len(matching) == 1, errors_of(data)
    return matching[0]


def document_error(text: str | bytes, **kwargs: Any) -> FieldError:
    with pytest.raises(DescriptorError) as info:
        parse_document(text, **{"max_bytes": MAX, **kwargs})
    [error] = info.value.errors
    assert error.field is None
    return error
