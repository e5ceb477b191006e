"""Descriptor v1, kind: Workflow: good workflows and the dispatch on kind."""

from __future__ import annotations

import json
import time

import pytest

import scheduling.descriptor.workflow as descriptor_workflow
from scheduling.descriptor import (
    MAX_WORKFLOW_TASKS,
    DescriptorError,
    load_descriptor,
    load_task,
    parse_descriptor,
    parse_document,
    parse_workflow,
    topological_order,
)
from scheduling.spec import Resources, TaskSpec, WorkflowSpec
from tests.unit.scheduling.workflow_descriptor.helpers import (
    MAX,
    SEED_CHAIN,
    cycle_messages,
    errors_of,
    task,
    workflow,
)


# --- good workflows -------------------------------------------------------------------------
def test_the_seed_chain_parses_with_its_dependencies_and_order():
    spec = load_descriptor(SEED_CHAIN, max_bytes=MAX)
    assert isinstance(spec, WorkflowSpec)
    assert (spec.name, spec.project) == ("materials-chain", "materials")
    assert [(t.name, t.depends_on) for t in spec.tasks] == [
        ("simulate", ()),
        ("train", ("simulate",)),
        ("infer", ("train",)),
        ("agent", ("infer",)),
    ]
    assert topological_order(spec) == ["simulate", "train", "infer", "agent"]


def test_every_task_inherits_the_workflows_project_and_keeps_its_own_fields():
    spec = load_descriptor(SEED_CHAIN, max_bytes=MAX)
    assert {t.project for t in spec.tasks} == {"materials"}
    simulate, train, _, agent = spec.tasks
    assert simulate.resources == Resources(cpus=64)
    assert (simulate.type, simulate.walltime_s, simulate.command) == (
        "hpc-simulation",
        7200,
        ("lmp", "-in", "in.lj"),
    )
    assert (train.resources.gpus, train.estimate_s) == (8, 6 * 3600)
    assert (agent.retry_count, agent.fail_action, agent.wait_timeout_s, agent.trigger_file) == (
        2,
        "skip",
        6 * 3600,
        "/shared/materials/READY",
    )
    assert spec.task("train") == train
    with pytest.raises(KeyError):
        spec.task("nope")


def test_the_seed_chain_reads_the_same_as_json():
    text = json.dumps(parse_document(SEED_CHAIN, max_bytes=MAX))
    assert load_descriptor(text, max_bytes=MAX) == load_descriptor(SEED_CHAIN, max_bytes=MAX)


def test_a_workflow_spec_survives_a_round_trip_through_as_dict_and_json():
    spec = load_descriptor(SEED_CHAIN, max_bytes=MAX)
    stored = json.loads(json.dumps(spec.as_dict()))
    assert WorkflowSpec.from_dict(stored) == spec


def test_a_diamond_parses_and_d_comes_after_both_b_and_c():
    spec = parse_workflow(workflow(task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c")))
    assert spec.task("d").depends_on == ("b", "c")
    assert topological_order(spec) == ["a", "b", "c", "d"]


def test_topological_order_breaks_ties_in_document_order():
    spec = parse_workflow(
        workflow(task("d", "b", "c"), task("c"), task("b", "a"), task("a"), task("e"))
    )
    # c and a are ready first (c comes first in the document); b after a, d after b and c.
    assert topological_order(spec) == ["c", "a", "b", "d", "e"]


def test_tasks_may_be_listed_before_the_tasks_they_depend_on():
    spec = parse_workflow(workflow(task("train", "simulate"), task("simulate")))
    assert topological_order(spec) == ["simulate", "train"]


def test_depends_on_takes_ids_of_existing_tasks_beside_names():
    spec = parse_workflow(
        workflow(task("a", 42), task("b", "a", 7, 42), task("c", 7, "b")),
    )
    assert [(t.depends_on, t.depends_on_ids) for t in spec.tasks] == [
        ((), (42,)),
        (("a",), (7, 42)),
        (("b",), (7,)),
    ]
    assert spec.external_ids == (42, 7)
    # ids are outside the workflow: they do not change the order
    assert topological_order(spec) == ["a", "b", "c"]


def test_a_name_made_of_digits_is_a_name_and_an_integer_is_an_id():
    spec = parse_workflow(workflow(task("42"), task("b", "42", 42)))
    assert (spec.tasks[1].depends_on, spec.tasks[1].depends_on_ids) == (("42",), (42,))


def test_a_task_may_repeat_the_workflows_project():
    spec = parse_workflow(workflow(task("a", project="materials")))
    assert spec.tasks[0].project == "materials"


def test_a_workflow_of_the_maximum_size_parses_quickly():
    tasks = [task(f"t{i}", *([f"t{i - 1}"] if i else [])) for i in range(MAX_WORKFLOW_TASKS)]
    text = json.dumps(workflow(*tasks))
    start = time.perf_counter()
    spec = load_descriptor(text, max_bytes=len(text))
    order = topological_order(spec)
    assert time.perf_counter() - start < 1.0
    assert order == [f"t{i}" for i in range(MAX_WORKFLOW_TASKS)]


def test_long_chains_and_cycles_need_no_recursion(monkeypatch: pytest.MonkeyPatch):
    # Far beyond Python's recursion limit: the DAG code must be iterative.
    monkeypatch.setattr(descriptor_workflow, "MAX_WORKFLOW_TASKS", 5000)
    tasks = [task(f"t{i}", *([f"t{i - 1}"] if i else [])) for i in range(5000)]
    spec = parse_workflow(workflow(*tasks))
    assert topological_order(spec)[-1] == "t4999"

    tasks[0]["depends_on"] = ["t4999"]
    [message] = cycle_messages(workflow(*tasks))
    assert message.startswith("cycle: t0 → t1 → t2")
    assert message.endswith("→ t4999 → t0 (5000 tasks)")


# --- kind dispatch --------------------------------------------------------------------------
def test_load_descriptor_dispatches_on_kind():
    single = load_descriptor(
        "apiVersion: switchyard/v1\nkind: Task\nname: a\nproject: p\ncommand: [x]\n",
        max_bytes=MAX,
    )
    assert isinstance(single, TaskSpec)
    assert isinstance(parse_descriptor(workflow(task("a"))), WorkflowSpec)


def test_load_task_refuses_a_workflow_and_says_where_to_send_it():
    with pytest.raises(DescriptorError) as info:
        load_task(SEED_CHAIN, max_bytes=MAX)
    [error] = info.value.errors
    assert error.field == "kind"
    assert "this endpoint takes kind: Task; send workflows to /api/v1/workflows/" in (error.message)


def test_parse_workflow_refuses_a_single_task_and_says_where_to_send_it():
    data = {"apiVersion": "switchyard/v1", "kind": "Task", "name": "a", "project": "p"}
    [error] = errors_of(data)
    assert error.field == "kind"
    assert "takes kind: Workflow; send single tasks to /api/v1/tasks/" in error.message


def test_an_unknown_kind_names_both_kinds():
    with pytest.raises(DescriptorError) as info:
        parse_descriptor(workflow(task("a"), kind="Job", apiVersion="v2"))
    assert [(e.field, e.message) for e in info.value.errors] == [
        ("apiVersion", 'must be "switchyard/v1"'),
        ("kind", 'must be "Task" or "Workflow"'),
    ]


def test_a_missing_kind_names_both_kinds_and_other_errors_are_still_reported():
    data = workflow(task("a", resources={"gpus": -1}))
    del data["kind"]
    with pytest.raises(DescriptorError) as info:
        parse_descriptor(data)
    fields = {e.field: e.message for e in info.value.errors}
    assert fields["kind"] == 'is required; must be "Task" or "Workflow"'
    assert "tasks[0].resources.gpus" in fields
