"""Descriptor v1: depends_on in kind Task, stored specs, the DAG helpers on hand-built
specs, and the JSON Schema."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from scheduling.descriptor import (
    DESCRIPTOR_JSON_SCHEMA,
    DescriptorError,
    load_descriptor,
    parse_document,
    parse_task,
    parse_workflow,
    topological_order,
)
from scheduling.spec import TaskSpec, WorkflowSpec
from tests.unit.scheduling.workflow_descriptor.helpers import (
    MAX,
    SEED_CHAIN,
    errors_of,
    task,
    workflow,
)


# --- kind Task ------------------------------------------------------------------------------
def test_kind_task_with_a_name_in_depends_on_is_refused():
    text = (
        "apiVersion: switchyard/v1\nkind: Task\nname: train\nproject: p\ncommand: [x]\n"
        "depends_on: [simulate, 42]\n"
    )
    with pytest.raises(DescriptorError) as info:
        load_descriptor(text, max_bytes=MAX)
    [error] = info.value.errors
    assert error.field == "depends_on[0]"
    assert error.message == (
        "a single task has no siblings to depend on; use a Workflow, or give a task id"
    )


def test_kind_task_keeps_ids_in_depends_on_ids():
    data = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": "a",
        "project": "p",
        "command": ["x"],
        "depends_on": [42, 7],
    }
    spec = parse_task(data)
    assert (spec.depends_on, spec.depends_on_ids) == ((), (42, 7))


# --- TaskSpec storage -----------------------------------------------------------------------
def test_task_spec_from_dict_reads_dicts_stored_before_depends_on_ids():
    legacy = TaskSpec(name="a", project="p", command=("x",)).as_dict()
    del legacy["depends_on_ids"]
    legacy["depends_on"] = ["gen-data", "42"]  # ids used to be kept as text
    spec = TaskSpec.from_dict(legacy)
    assert (spec.depends_on, spec.depends_on_ids) == (("gen-data",), (42,))


def test_task_spec_from_dict_keeps_digit_names_once_depends_on_ids_is_stored():
    spec = TaskSpec(name="b", project="p", depends_on=("42",), depends_on_ids=(42,))
    assert TaskSpec.from_dict(json.loads(json.dumps(spec.as_dict()))) == spec


# --- helpers on hand-built specs ------------------------------------------------------------
def test_topological_order_refuses_a_spec_with_a_cycle():
    spec = WorkflowSpec(
        name="w",
        project="p",
        tasks=(
            TaskSpec(name="a", project="p", depends_on=("b",)),
            TaskSpec(name="b", project="p", depends_on=("a",)),
        ),
    )
    with pytest.raises(ValueError, match="cycle"):
        topological_order(spec)


def test_topological_order_refuses_a_spec_with_an_unknown_name():
    spec = WorkflowSpec(
        name="w", project="p", tasks=(TaskSpec(name="a", project="p", depends_on=("b",)),)
    )
    with pytest.raises(ValueError, match="'b'"):
        topological_order(spec)


# --- JSON Schema ----------------------------------------------------------------------------
def _validator():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(DESCRIPTOR_JSON_SCHEMA)
    return jsonschema.Draft202012Validator(DESCRIPTOR_JSON_SCHEMA)


def test_the_schema_accepts_the_workflows_the_parser_accepts():
    validator = _validator()
    for data in (
        parse_document(SEED_CHAIN, max_bytes=MAX),
        workflow(task("a", 42), task("b", "a", project="materials")),
    ):
        parse_workflow(data)
        assert list(validator.iter_errors(data)) == []


def _seed_chain_with(change: Any) -> dict[str, Any]:
    data = copy.deepcopy(parse_document(SEED_CHAIN, max_bytes=MAX))
    change(data)
    return data


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["tasks"][1].update(apiVersion="switchyard/v1"),
        lambda d: d["tasks"][1].update(kind="Task"),
        lambda d: d["tasks"][1]["resources"].update(gpus="eight"),
        lambda d: d["tasks"][1].update(depends_on=["Bad_Name"]),
        lambda d: d["tasks"][1].pop("command"),
        lambda d: d.update(tasks=[]),
        lambda d: d.pop("tasks"),
        lambda d: d.update(bogus=1),
        lambda d: d.update(tasks=[task(f"t{i}") for i in range(1001)]),
    ],
)
def test_the_schema_rejects_workflows_the_parser_rejects(change: Any):
    validator = _validator()
    data = _seed_chain_with(change)
    errors_of(data)
    assert list(validator.iter_errors(data)) != []


def test_the_schema_refuses_names_in_a_single_tasks_depends_on():
    validator = _validator()
    data = {
        "apiVersion": "switchyard/v1",
        "kind": "Task",
        "name": "a",
        "project": "p",
        "command": ["x"],
    }
    assert list(validator.iter_errors({**data, "depends_on": [42]})) == []
    assert list(validator.iter_errors({**data, "depends_on": ["b"]})) != []
