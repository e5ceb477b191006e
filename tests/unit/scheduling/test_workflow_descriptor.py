"""Descriptor v1, kind: Workflow: task bodies, the DAG checks, and the DAG helpers."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

import scheduling.descriptor.workflow as descriptor_workflow
from scheduling.descriptor import (
    DESCRIPTOR_JSON_SCHEMA,
    MAX_WORKFLOW_TASKS,
    DescriptorError,
    FieldError,
    load_descriptor,
    load_task,
    parse_descriptor,
    parse_document,
    parse_task,
    parse_workflow,
    topological_order,
)
from scheduling.spec import Resources, TaskSpec, WorkflowSpec

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


# --- task bodies ----------------------------------------------------------------------------
def test_errors_inside_tasks_carry_the_task_index_and_are_all_collected():
    data = workflow(
        task("simulate"),
        task("train", "simulat", resources={"gpus": "eight"}),
        task("infer", resources={"gpus": -1}, walltime="soon"),
        {"name": "agent"},
        name="Bad Name",
    )
    fields = {e.field for e in errors_of(data)}
    assert fields == {
        "name",
        "tasks[1].depends_on[0]",
        "tasks[1].resources.gpus",
        "tasks[2].resources.gpus",
        "tasks[2].walltime",
        "tasks[3]",  # neither command nor script: an error of the task as a whole
    }


@pytest.mark.parametrize("header", ["apiVersion", "kind"])
def test_api_version_and_kind_inside_a_task_are_refused(header: str):
    value = {"apiVersion": "switchyard/v1", "kind": "Task"}[header]
    error = the_error(workflow(task("a"), task("b", **{header: value})), f"tasks[1].{header}")
    assert error.message == "is set once on the workflow, not on each task"
    assert error.got == value


def test_a_task_naming_another_project_is_refused():
    error = the_error(workflow(task("a", project="physics")), "tasks[0].project")
    assert 'must be the workflow\'s project "materials"' in error.message
    assert error.got == "physics"


def test_unknown_fields_in_a_task_get_a_hint_and_the_list_without_the_header():
    error = the_error(workflow(task("a", depends=["b"])), "tasks[0].depends")
    assert "did you mean depends_on?" in error.message
    assert "apiVersion" not in error.message


def test_unknown_fields_of_the_workflow_are_refused():
    error = the_error(workflow(task("a"), task_list=[]), "task_list")
    assert "did you mean tasks?" in error.message


def test_a_task_must_be_a_mapping():
    error = the_error(workflow(task("a"), ["b"]), "tasks[1]")
    assert "must be a mapping of task fields" in error.message


def test_a_task_name_is_required_and_checked_like_a_task_name():
    errors = errors_of(workflow({"command": ["x"]}, task("Bad_Name")))
    assert {e.field for e in errors} == {"tasks[0].name", "tasks[1].name"}


def test_trigger_paths_are_checked_inside_tasks():
    error = the_error(workflow(task("a", trigger={"file": "/a/../etc/x"})), "tasks[0].trigger.file")
    assert ".. components" in error.message


@pytest.mark.parametrize(
    ("tasks", "fragment"),
    [
        (None, "is required: a list of 1 to 1000 tasks"),
        ([], "must have at least one task"),
        ({"a": {}}, "must be a list of 1 to 1000 tasks"),
    ],
)
def test_tasks_must_be_a_non_empty_list(tasks: Any, fragment: str):
    data = workflow()
    data["tasks"] = tasks
    assert fragment in the_error(data, "tasks").message


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        (0, "task id (an integer >= 1)"),
        (True, "task id"),
        (2**53, "ids are at most 9007199254740991"),
        ("Bad_Name", "task name"),
    ],
)
def test_bad_depends_on_entries_are_refused(item: Any, fragment: str):
    error = the_error(workflow(task("a"), task("b", item)), "tasks[1].depends_on[0]")
    assert fragment in error.message


# --- the DAG --------------------------------------------------------------------------------
def test_a_duplicate_task_name_names_the_duplicate_and_its_first_use():
    data = workflow(task("simulate"), task("train"), task("infer"), task("train"))
    error = the_error(data, "tasks[3].name")
    assert error.message == "duplicate task name 'train': tasks[1] already has it"
    assert error.got == "train"


def test_an_unknown_dependency_suggests_the_closest_name():
    data = workflow(task("simulate"), task("train", "simulat"))
    error = the_error(data, "tasks[1].depends_on[0]")
    assert error.message == (
        "task 'train': no task named 'simulat' in this workflow; did you mean 'simulate'?"
    )
    assert error.got == "simulat"


def test_an_unknown_dependency_without_a_close_name_gets_no_hint():
    error = the_error(workflow(task("a"), task("b", "zzz-unrelated")), "tasks[1].depends_on[0]")
    assert error.message == "task 'b': no task named 'zzz-unrelated' in this workflow"


def test_a_self_dependency_names_the_task():
    error = the_error(workflow(task("a"), task("train", "a", "train")), "tasks[1].depends_on[1]")
    assert error.message == "task 'train' cannot depend on itself"


def test_a_two_task_cycle_is_reported_in_order():
    data = workflow(task("simulate"), task("train", "infer"), task("infer", "train"))
    assert cycle_messages(data) == ["cycle: train → infer → train"]


def test_a_cycle_of_three_names_all_three():
    data = workflow(task("a", "c"), task("b", "a"), task("c", "b"))
    [message] = cycle_messages(data)
    # each task waits for the one before it
    assert message == "cycle: a → b → c → a"


def test_two_separate_cycles_are_both_reported():
    data = workflow(
        task("a", "b"),
        task("b", "a"),
        task("ok"),
        task("x", "z", "ok"),
        task("y", "x"),
        task("z", "y"),
        task("after", "y"),
    )
    assert cycle_messages(data) == ["cycle: a → b → a", "cycle: x → y → z → x"]


def test_a_cycle_inside_a_larger_tangle_is_one_error_per_tangle():
    # a <-> b and b <-> c form one strongly connected group: one representative cycle.
    data = workflow(task("a", "b"), task("b", "a", "c"), task("c", "b"))
    [message] = cycle_messages(data)
    assert message == "cycle: a → b → a"


def test_dag_errors_are_found_even_when_tasks_have_other_errors():
    data = workflow(
        task("a", "b", resources={"gpus": -1}),
        task("b", "a", "nope"),
    )
    fields = {e.field for e in errors_of(data)}
    assert fields == {"tasks[0].resources.gpus", "tasks[1].depends_on[1]", "tasks"}


def test_a_dependency_on_a_task_whose_name_is_invalid_is_not_called_unknown():
    data = workflow(task("Bad_Name"), task("b", "a-ok"))
    fields = {e.field for e in errors_of(data)}
    assert fields == {"tasks[0].name", "tasks[1].depends_on[0]"}


def test_ten_thousand_tasks_are_refused_quickly_before_any_task_is_checked():
    tasks = [
        {"name": f"t{i}", "command": ["true"], "depends_on": [f"t{i - 1}"]}
        for i in range(1, 10_001)
    ]
    text = json.dumps(workflow(*tasks))
    start = time.perf_counter()
    with pytest.raises(DescriptorError) as info:
        load_descriptor(text, max_bytes=10 * len(text))
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0
    assert [(e.field, e.message) for e in info.value.errors] == [
        ("tasks", "must have at most 1000 tasks, got 10000")
    ]


def test_ten_thousand_tasks_at_the_api_size_limit_are_refused_by_size():
    tasks = [task(f"t{i}") for i in range(10_000)]
    with pytest.raises(DescriptorError) as info:
        load_descriptor(json.dumps(workflow(*tasks)), max_bytes=MAX)
    assert "the limit is 262144 bytes" in info.value.errors[0].message


def test_too_many_dependencies_in_all_are_refused_before_any_task_is_checked():
    names = [f"t{i}" for i in range(25)]
    tasks = [task(f"u{i}", *names, resources={"gpus": "x"}) for i in range(900)]
    errors = errors_of(workflow(*[task(n) for n in names], *tasks))
    assert [(e.field, e.message) for e in errors] == [
        ("tasks", "must have at most 20000 depends_on entries in all, got 22500")
    ]


def test_twenty_thousand_unknown_dependencies_are_refused_quickly():
    # "did you mean" compares each unknown name with every task name; unbounded, this
    # document (about 300 KiB) took minutes. Every unknown name still gets its error.
    tasks = [
        task(f"task-{i:04d}", *[f"tusk-{(i * 20 + j) % 9999:04d}" for j in range(20)])
        for i in range(MAX_WORKFLOW_TASKS)
    ]
    data = workflow(*tasks)
    start = time.perf_counter()
    errors = errors_of(data)
    assert time.perf_counter() - start < 1.5
    assert len(errors) == 20_000
    assert "did you mean 'task-0000'?" in errors[0].message


def test_workflow_errors_are_json_serialisable():
    data = workflow(
        task("a", "a", "b"),
        task("b", "a", 10**30, resources={"gpus": float("nan")}),
        {"name": ["x"], "depends_on": [{"a": 1}]},
        task("a"),
    )
    errors = errors_of(data)
    assert errors
    json.dumps([e.as_dict() for e in errors], allow_nan=False)


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
