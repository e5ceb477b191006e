"""What the workflow descriptor's tests share: the example chain, task and workflow builders,
and readers of the errors."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.descriptor import (
    DescriptorError,
    FieldError,
    parse_workflow,
)

MAX = 256 * 1024

SEED_CHAIN = """\
apiVersion: switchyard/v1
kind: Workflow
name: materials-chain
project: materials
tasks:
  - name: simulate
    type: hpc-simulation
    resources: {cpus: 64}
    walltime: 2h
    command: ["lmp", "-in", "in.lj"]
  - name: train
    type: ai-training
    depends_on: [simulate]
    resources: {gpus: 8, cpus: 64}
    estimate: 6h
    command: ["python", "train.py"]
  - name: infer
    type: ai-inference
    depends_on: [train]
    resources: {gpus: 1}
    walltime: 1h
    command: ["python", "infer.py"]
  - name: agent
    type: agent
    project: materials          # optional, equal to the workflow's
    depends_on: [infer]
    retry_count: 2
    fail_action: skip
    wait_timeout: 6h
    trigger: {file: /shared/materials/READY}
    command: ["python", "agent.py"]
"""


def task(name: str, *deps: str | int, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "command": ["true"], **fields}
    if deps:
        body["depends_on"] = list(deps)
    return body


def workflow(*tasks: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "wf",
        "project": "materials",
        "tasks": list(tasks),
        **fields,
    }


def errors_of(data: Any) -> list[FieldError]:
    with pytest.raises(DescriptorError) as info:
        parse_workflow(data)
    return info.value.errors


def the_error(data: Any, field: str | None) -> FieldError:
    errors = errors_of(data)
    matching = [e for e in errors if e.field == field]
    assert len(matching) == 1, errors
    return matching[0]


def cycle_messages(data: Any) -> list[str]:
    return [e.message for e in errors_of(data) if e.field == "tasks"]
