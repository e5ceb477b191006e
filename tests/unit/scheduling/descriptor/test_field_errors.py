"""Task descriptor v1: field errors name the field, what was expected and what came."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.descriptor import (
    DescriptorError,
    parse_document,
    parse_task,
)
from tests.unit.scheduling.descriptor.helpers import (
    _DROP,
    MAX,
    doc,
    errors_of,
    the_error,
)


# --- field errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "field", "fragment", "got"),
    [
        ({"apiVersion": "v1"}, "apiVersion", 'must be "switchyard/v1"', "v1"),
        ({"apiVersion": _DROP}, "apiVersion", "is required", None),
        ({"kind": _DROP}, "kind", "is required", None),
        ({"name": _DROP}, "name", "is required", None),
        ({"name": "MD_run"}, "name", "lower-case letters, digits and hyphens", "MD_run"),
        ({"name": "-run"}, "name", "starting and ending with a letter or digit", "-run"),
        ({"name": ""}, "name", "1-63 characters", ""),
        ({"name": "a" * 64}, "name", "at most 63 characters", "a" * 64),
        ({"name": "run\n"}, "name", "lower-case letters", "run\n"),
        ({"name": 7}, "name", "lower-case letters", 7),
        ({"project": _DROP}, "project", "is required", None),
        ({"project": "a b"}, "project", "letters, digits, hyphens and underscores", "a b"),
        ({"type": "hpc"}, "type", "must be one of hpc-simulation, ai-training", "hpc"),
        ({"queue": "gpu queue"}, "queue", "letters, digits, hyphens", "gpu queue"),
        ({"resources": [1]}, "resources", "must be a mapping", "[1]"),
        ({"resources": {"gpus": "eight"}}, "resources.gpus", "must be an integer >= 0", "eight"),
        ({"resources": {"gpus": -1}}, "resources.gpus", "must be an integer >= 0", -1),
        ({"resources": {"gpus": 10001}}, "resources.gpus", "must be an integer <= 10000", 10001),
        ({"resources": {"cpus": 0}}, "resources.cpus", "must be an integer >= 1", 0),
        ({"resources": {"cpus": 2.0}}, "resources.cpus", "must be an integer >= 1", 2.0),
        ({"resources": {"cpus": "8"}}, "resources.cpus", "(not quoted)", "8"),
        ({"resources": {"cpus": "010"}}, "resources.cpus", "(without leading zeros)", "010"),
        ({"resources": {"cpus": 100001}}, "resources.cpus", "<= 100000", 100001),
        ({"resources": {"nodes": 0}}, "resources.nodes", "must be an integer >= 1", 0),
        ({"resources": {"nodes": 10001}}, "resources.nodes", "<= 10000", 10001),
        ({"resources": {"memory": "1.5G"}}, "resources.memory", "such as 512Gi", "1.5G"),
        ({"resources": {"memory": "65Ti"}}, "resources.memory", "at most 64Ti", "65Ti"),
        ({"resources": {"gpu_type": "a100; rm"}}, "resources.gpu_type", "GPU model", "a100; rm"),
        ({"walltime": "forever"}, "walltime", "such as 90s", "forever"),
        ({"estimate": 0}, "estimate", "longer than 0", 0),
        ({"wait_timeout": "400d"}, "wait_timeout", "at most 365d", "400d"),
        ({"wait_timeout": "1h"}, "wait_timeout", "this task has neither", "1h"),
        ({"walltime": "1h", "estimate": "2h"}, "estimate", "not be longer than walltime", "2h"),
        ({"command": "python train.py"}, "command", "for a shell line use script", None),
        ({"command": []}, "command", "non-empty list of strings", "[]"),
        ({"command": {"a": 1}}, "command", "non-empty list of strings", "{'a': 1}"),
        ({"command": ["sleep", 10]}, "command[1]", "expected a string, quote it", 10),
        ({"command": ["", "x"]}, "command[0]", "the program to run", ""),
        ({"command": ["a", "b\x00"]}, "command[1]", "NUL", "b\x00"),
        ({"command": ["a", "b\r"]}, "command[1]", "carriage return", "b\r"),
        ({"command": ["a", "x" * 4097]}, "command[1]", "at most 4096 characters", None),
        ({"command": ["a"] * 4097}, "command", "at most 4096 arguments", 4097),
        ({"command": _DROP, "script": "  \n"}, "script", "non-empty string", "  \n"),
        ({"command": _DROP, "script": ["echo"]}, "script", "non-empty string", "['echo']"),
        ({"command": _DROP, "script": "a\x00"}, "script", "NUL", "a\x00"),
        ({"command": _DROP, "script": "echo\r\n"}, "script", "LF line endings", "echo\r\n"),
        ({"command": _DROP, "script": "x" * 65537}, "script", "at most 65536 bytes", None),
        ({"command": _DROP, "script": "é" * 40000}, "script", "it is 80000", None),
        (
            {"command": _DROP},
            None,
            "exactly one of command or script is required; got neither",
            None,
        ),
        ({"script": "echo"}, None, "got both", None),
        ({"image": "my image"}, "image", "container image", "my image"),
        ({"image": "$(reboot)"}, "image", "container image", "$(reboot)"),
        ({"env": ["A=1"]}, "env", "mapping of variable names", "['A=1']"),
        ({"env": {"A": 1}}, "env.A", "expected a string, quote it", 1),
        ({"env": {"A": True}}, "env.A", "expected a string, quote it", True),
        ({"env": {"A": "x\ny"}}, "env.A", "newline", "x\ny"),
        ({"env": {"A": "x\x00"}}, "env.A", "NUL", "x\x00"),
        ({"env": {"A": "x" * 4097}}, "env.A", "at most 4096 characters", None),
        ({"env": {f"V{i}": "x" for i in range(129)}}, "env", "at most 128 variables", 129),
        ({"depends_on": "gen-data"}, "depends_on", "must be a list", "gen-data"),
        ({"depends_on": ["Gen_Data"]}, "depends_on[0]", "task name", "Gen_Data"),
        ({"depends_on": [0]}, "depends_on[0]", "task id (an integer >= 1)", 0),
        ({"depends_on": [True]}, "depends_on[0]", "task id", True),
        ({"depends_on": ["a", "b", "a"]}, "depends_on[2]", "duplicate of depends_on[0]", "a"),
        ({"depends_on": ["train-1"]}, "depends_on[0]", "cannot depend on itself", "train-1"),
        ({"depends_on": ["a"] * 1001}, "depends_on", "at most 1000 entries", 1001),
        ({"retry_count": 11}, "retry_count", "must be an integer <= 10", 11),
        ({"retry_count": -1}, "retry_count", "must be an integer >= 0", -1),
        ({"fail_action": "retry"}, "fail_action", "must be one of abort, skip", "retry"),
        ({"priority": "urgent"}, "priority", "must be one of low, normal, high", "urgent"),
        ({"trigger": "/shared/READY"}, "trigger", "must be a mapping", "/shared/READY"),
        ({"trigger": {}}, "trigger.file", "is required", None),
        ({"trigger": {"file": "../READY"}}, "trigger.file", ".. components", "../READY"),
        ({"trigger": {"file": "a/./b"}}, "trigger.file", "no . in it", "a/./b"),
        ({"workdir": "runs//1"}, "workdir", "single /", "runs//1"),
        ({"workdir": ""}, "workdir", "absolute, or relative", ""),
        ({"trigger": {"file": "/a/../etc"}}, "trigger.file", ".. components", "/a/../etc"),
        ({"trigger": {"file": "/a\nb"}}, "trigger.file", "one line", "/a\nb"),
    ],
)
def test_it_names_the_field_says_what_was_expected_and_what_it_got(
    changes: dict[str, Any], field: str | None, fragment: str, got: Any
):
    error = the_error(doc(**changes), field)
    assert fragment in error.message
    if got is not None:
        assert error.got == got


def test_got_is_cut_to_about_80_characters():
    error = the_error(doc(name="x" * 500), "name")
    assert len(error.got) <= 80
    assert error.got.endswith("...")


def test_kind_workflow_is_not_supported_here_and_nothing_else_is_checked():
    errors = errors_of({"apiVersion": "switchyard/v1", "kind": "Workflow", "tasks": []})
    assert [(e.field, e.got) for e in errors] == [("kind", "Workflow")]
    assert "not supported here" in errors[0].message


def test_another_kind_is_refused():
    error = the_error(doc(kind="Job"), "kind")
    assert (error.message, error.got) == ('must be "Task"', "Job")


@pytest.mark.parametrize(
    ("changes", "field", "hint"),
    [
        ({"bogus": 1}, "bogus", None),
        ({"Name": "x"}, "Name", "did you mean name?"),
        ({"resources": {"gpu": 8}}, "resources.gpu", "did you mean gpus?"),
        ({"resources": {"mem": "1Gi"}}, "resources.mem", None),
        ({"trigger": {"file": "/r", "glob": "*"}}, "trigger.glob", None),
        ({"walltime_s": 60}, "walltime_s", "did you mean walltime?"),
    ],
)
def test_it_rejects_unknown_fields_with_the_dotted_name(
    changes: dict[str, Any], field: str, hint: str | None
):
    error = the_error(doc(**changes), field)
    assert error.message.startswith("unknown field")
    assert "expected one of" in error.message
    if hint:
        assert hint in error.message
    if field.startswith("resources."):
        assert "nodes, cpus, memory, gpus, gpu_type" in error.message


def test_it_collects_every_error_not_just_the_first():
    data = doc(
        apiVersion="v2",
        name="Bad Name",
        resources={"gpus": "eight", "cpus": True, "gpu": 1},
        walltime="soon",
        env={"LD_PRELOAD": "/tmp/x.so", "ok": "1"},
        retry_count=99,
        bogus=True,
    )
    fields = [e.field for e in errors_of(data)]
    assert set(fields) == {
        "apiVersion",
        "name",
        "resources.gpus",
        "resources.cpus",
        "resources.gpu",
        "walltime",
        "env.LD_PRELOAD",
        "env.ok",
        "retry_count",
        "bogus",
    }


def test_descriptor_error_reads_well_as_text():
    with pytest.raises(DescriptorError) as info:
        parse_task(doc(resources={"gpus": "eight"}))
    assert str(info.value) == 'resources.gpus: must be an integer >= 0, got "eight"'


@pytest.mark.parametrize(
    ("changes", "field", "got"),
    [
        ({"resources": {"cpus": True}}, "resources.cpus", True),
        ({"resources": {"gpus": False}}, "resources.gpus", False),
        ({"resources": {"nodes": True}}, "resources.nodes", True),
        ({"resources": {"memory": True}}, "resources.memory", True),
        ({"retry_count": True}, "retry_count", True),
        ({"walltime": True}, "walltime", True),
        ({"depends_on": [True]}, "depends_on[0]", True),
    ],
)
def test_booleans_are_not_integers(changes: dict[str, Any], field: str, got: bool):
    assert the_error(doc(**changes), field).got is got


def test_yaml_true_is_not_a_cpu_count():
    text = "apiVersion: switchyard/v1\nkind: Task\nname: a\nproject: p\ncommand: [x]\n"
    error = the_error(
        parse_document(text + "resources: {cpus: yes}\n", max_bytes=MAX), "resources.cpus"
    )
    assert error.got is True


@pytest.mark.parametrize(
    ("resources", "field", "got"),
    [
        ({"nodes": 4, "gpus": 30}, "resources.gpus", 30),
        ({"nodes": 3, "cpus": 256}, "resources.cpus", 256),
        ({"nodes": 2}, "resources.cpus", 1),  # the default of 1 cpu does not split over 2 nodes
    ],
)
def test_cpus_and_gpus_must_divide_evenly_by_nodes(resources: dict, field: str, got: int):
    error = the_error(doc(resources=resources), field)
    assert "must divide evenly by resources.nodes" in error.message
    assert error.got == got


def test_four_nodes_of_eight_gpus_is_thirty_two_gpus():
    spec = parse_task(doc(resources={"nodes": 4, "gpus": 32, "cpus": 128}))
    assert (spec.resources.nodes, spec.resources.gpus, spec.resources.cpus) == (4, 32, 128)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("LD_PRELOAD", "dynamic loader"),
        ("LD_LIBRARY_PATH", "dynamic loader"),
        ("SLURM_JOB_ID", "Slurm sets"),
        ("SBATCH_ACCOUNT", "override"),
        ("SWITCHYARD_TOKEN", "reserved for the portal"),
        ("PATH", "search path"),
        ("HOME", "identity"),
        ("BASH_ENV", "shell"),
        ("IFS", "shell"),
        ("PYTHONPATH", "foreign code"),
        ("NVIDIA_VISIBLE_DEVICES", "GPUs not allocated"),
        ("APPTAINER_BIND", "container runtime"),
    ],
)
def test_env_refuses_reserved_names_and_says_why(name: str, reason: str):
    error = the_error(doc(env={name: "x"}), f"env.{name}")
    assert error.message.startswith("is reserved")
    assert reason in error.message
    assert error.got == name


@pytest.mark.parametrize("name", ["omp_num_threads", "1ABC", "A-B", "A B", "", "É", "A" * 256])
def test_env_refuses_bad_names(name: str):
    [error] = errors_of(doc(env={name: "x"}))
    assert error.field.startswith("env.")
    assert "^[A-Z_][A-Z0-9_]*$" in error.message


def test_env_accepts_ordinary_names_and_keeps_them_sorted():
    spec = parse_task(doc(env={"OMP_NUM_THREADS": "4", "_X": "", "A1": "a b $c"}))
    assert spec.env == (("A1", "a b $c"), ("OMP_NUM_THREADS", "4"), ("_X", ""))


def test_depends_on_takes_task_ids_and_refuses_names_in_a_single_task():
    spec = parse_task(doc(depends_on=[17, 4]))
    assert (spec.depends_on, spec.depends_on_ids) == ((), (17, 4))
    error = the_error(doc(depends_on=["gen-data", 17]), "depends_on[0]")
    assert "a single task has no siblings to depend on" in error.message
    assert error.got == "gen-data"
