"""Descriptor v1, kind: Workflow: task bodies and the DAG checks."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from scheduling.descriptor import (
    MAX_WORKFLOW_TASKS,
    DescriptorError,
    load_descriptor,
)
from tests.unit.scheduling.workflow_descriptor.helpers import (
    MAX,
    cycle_messages,
    errors_of,
    task,
    the_error,
    workflow,
)


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
