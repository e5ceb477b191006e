"""Task descriptor v1: parsing, validation, error shape, and the parser's own defences."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from scheduling.descriptor import (
    DESCRIPTOR_JSON_SCHEMA,
    DescriptorError,
    FieldError,
    load_task,
    parse_document,
    parse_duration,
    parse_size,
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


# --- good descriptors -----------------------------------------------------------------------
def test_it_reads_the_full_yaml_example_into_a_task_spec_with_every_field():
    assert load_task(FULL_YAML, max_bytes=MAX) == FULL_SPEC


def test_it_reads_the_same_descriptor_as_json_text_and_bytes():
    text = json.dumps(parse_document(FULL_YAML, max_bytes=MAX))
    assert load_task(text, max_bytes=MAX) == FULL_SPEC
    assert load_task(text.encode(), fmt="json", max_bytes=MAX) == FULL_SPEC


def test_the_spec_survives_a_round_trip_through_as_dict():
    assert TaskSpec.from_dict(FULL_SPEC.as_dict()) == FULL_SPEC
    assert json.loads(json.dumps(FULL_SPEC.as_dict())) == FULL_SPEC.as_dict()


def test_as_dict_is_what_dataclasses_asdict_gives_with_lists_for_sequences():
    import dataclasses

    expected = dataclasses.asdict(FULL_SPEC)
    expected.update(
        command=list(FULL_SPEC.command),
        env=dict(FULL_SPEC.env),
        secret_env=dict(FULL_SPEC.secret_env),
        depends_on=list(FULL_SPEC.depends_on),
        depends_on_ids=list(FULL_SPEC.depends_on_ids),
        inputs=list(FULL_SPEC.inputs),
    )
    assert FULL_SPEC.as_dict() == expected
    assert FULL_SPEC.as_dict()["resources"] is not FULL_SPEC.as_dict()["resources"]


def test_a_minimal_descriptor_gets_the_defaults():
    spec = parse_task(doc())
    assert spec == TaskSpec(name="train-1", project="ml", command=("python", "train.py"))
    assert spec.resources == Resources(cpus=1, memory_mib=1024, gpus=0, nodes=None)
    assert (spec.retry_count, spec.fail_action, spec.priority) == (0, "abort", "normal")


def test_it_takes_a_script_instead_of_a_command():
    yaml_text = (
        "apiVersion: switchyard/v1\nkind: Task\nname: s\nproject: p\n"
        "script: |\n  #!/bin/bash\n  echo hello\n"
        "resources: {nodes: 4, gpus: 32, cpus: 64, gpu_type: h100-80gb, memory: 1Ti}\n"
        "type: ai-training\nimage: nvcr.io/nvidia/pytorch:24.01-py3\npriority: high\n"
        "fail_action: skip\n"
    )
    spec = load_task(yaml_text, max_bytes=MAX)
    assert spec.command is None
    assert spec.script == "#!/bin/bash\necho hello\n"
    assert spec.resources == Resources(
        cpus=64, memory_mib=1024 * 1024, gpus=32, nodes=4, gpu_type="h100-80gb"
    )
    assert (spec.type, spec.image, spec.priority, spec.fail_action) == (
        "ai-training",
        "nvcr.io/nvidia/pytorch:24.01-py3",
        "high",
        "skip",
    )


def test_null_optional_fields_count_as_not_given():
    data = doc(
        type=None,
        queue=None,
        image=None,
        env=None,
        retry_count=None,
        priority=None,
        walltime=None,
        trigger=None,
        script=None,
        resources={"cpus": None, "gpus": 2, "gpu_type": None},
    )
    spec = parse_task(data)
    assert spec.resources == Resources(cpus=1, gpus=2)
    assert (spec.queue, spec.retry_count, spec.priority, spec.trigger_file) == (
        None,
        0,
        "normal",
        None,
    )


def test_sniffing_picks_json_for_a_brace_and_yaml_otherwise():
    assert parse_document('  \n{"a": 1}', max_bytes=MAX) == {"a": 1}
    assert parse_document("a: 1", max_bytes=MAX) == {"a": 1}
    # JSON is YAML too, so an explicit yaml format still reads it
    assert parse_document('{"a": 1}', fmt="yaml", max_bytes=MAX) == {"a": 1}
    error = document_error("a: 1", fmt="json")
    assert "invalid JSON at line 1, column 1" in error.message


def test_an_unknown_format_is_a_programming_error():
    with pytest.raises(ValueError, match="fmt"):
        parse_document("a: 1", fmt="toml", max_bytes=MAX)


def test_a_utf8_byte_order_mark_is_accepted():
    assert parse_document('\ufeff{"a": 1}'.encode(), max_bytes=MAX) == {"a": 1}
    assert parse_document("\ufeffa: 1", max_bytes=MAX) == {"a": 1}


def test_standard_yaml_tags_are_allowed():
    assert parse_document("a: !!str 5\nb: !!int 7\nc: !!map {d: !!null x}", max_bytes=MAX) == {
        "a": "5",
        "b": 7,
        "c": {"d": None},
    }


# --- durations and sizes --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("48h", 172800),
        ("1d12h", 129600),
        ("1h30m", 5400),
        ("2d", 172800),
        ("1d2h3m4s", 93784),
        ("3600", 3600),
        (3600, 3600),
        (1, 1),
        ("365d", 365 * 86400),
    ],
)
def test_parse_duration_accepts(value: Any, seconds: int):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (0, "longer than 0"),
        ("0s", "longer than 0"),
        (-5, "longer than 0"),
        ("-5m", "longer than 0"),
        ("", "must not be empty"),
        ("soon", "such as 90s"),
        ("1.5h", "such as 90s"),
        ("30m1h", "largest first"),
        ("48H", "such as 90s"),
        ("1h 30m", "such as 90s"),
        ("1:30", "such as 90s"),
        ("٣h", "such as 90s"),  # non-ASCII digits
        ("366d", "at most 365d"),
        (10**12, "at most 365d"),
        ("9" * 30 + "d", "at most 365d"),
        ("9" * 5000, "such as 90s"),
        (True, "such as 90s"),
        (1.5, "such as 90s"),
        (None, "such as 90s"),
        (["1h"], "such as 90s"),
    ],
)
def test_parse_duration_rejects(value: Any, fragment: str):
    with pytest.raises(ValueError, match=fragment) as info:
        parse_duration(value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("value", "mib"),
    [
        ("512Gi", 512 * 1024),
        ("64G", 61036),  # 64e9 bytes / 2**20 = 61035.16, rounded up
        ("1024M", 977),  # 1.024e9 bytes = 976.56 MiB
        ("1024Mi", 1024),
        ("1Ti", 1024 * 1024),
        ("1T", 953675),  # 1e12 bytes = 953674.3 MiB
        ("500K", 1),  # never less than asked: rounds up to a whole MiB
        ("1Ki", 1),
        ("2048", 2048),
        (2048, 2048),
        ("64Ti", 64 * 1024 * 1024),
    ],
)
def test_parse_size_accepts(value: Any, mib: int):
    assert parse_size(value) == mib


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (0, "greater than 0"),
        ("0Gi", "greater than 0"),
        (-1, "greater than 0"),
        ("1.5G", "such as 512Gi"),
        ("512gi", "such as 512Gi"),
        ("512GB", "such as 512Gi"),
        ("512 Gi", "such as 512Gi"),
        ("lots", "such as 512Gi"),
        ("", "such as 512Gi"),
        ("65Ti", "at most 64Ti"),
        (64 * 1024 * 1024 + 1, "at most 64Ti"),
        ("9" * 30, "such as 512Gi"),
        (True, "such as 512Gi"),
        (1.5, "such as 512Gi"),
    ],
)
def test_parse_size_rejects(value: Any, fragment: str):
    with pytest.raises(ValueError, match=fragment):
        parse_size(value)


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


# --- document-level defences ----------------------------------------------------------------
def test_it_rejects_a_yaml_alias_bomb_quickly():
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{cur}: &{cur} [{','.join([f'*{prev}'] * 9)}]")
    bomb = "\n".join(lines) + "\n"
    start = time.perf_counter()
    error = document_error(bomb)
    assert time.perf_counter() - start < 1.0
    assert "anchors (&a) are not allowed" in error.message
    assert "line 1, column 4" in error.message


def test_it_rejects_a_yaml_alias_even_without_an_anchor_first():
    assert "aliases (*x) are not allowed" in document_error("a: *x\n").message


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system [ls]\n",
        "a: !!binary aGVsbG8=\n",
        "a: !!set {x, y}\n",
        "a: !!timestamp 2024-01-01\n",
        "a: !custom x\n",
        "!!omap [a: 1]\n",
    ],
)
def test_it_refuses_yaml_tags_beyond_the_standard_safe_ones(text: str):
    assert "is not allowed" in document_error(text).message


@pytest.mark.parametrize(
    ("yaml_value", "expected"),
    [
        ("010", "010"),  # YAML 1.1 octal
        ("0x10", "0x10"),
        ("1:30", "1:30"),  # YAML 1.1 base 60
        ("1:30.5", "1:30.5"),
        ("2024-01-01", "2024-01-01"),
        ("1_000", 1000),
        ("-3", -3),
        ("2.5", 2.5),
        ("on", True),
        ("~", None),
    ],
)
def test_yaml_11_number_traps_stay_text(yaml_value: str, expected: Any):
    assert parse_document(f"a: {yaml_value}\n", max_bytes=MAX) == {"a": expected}


def test_walltime_written_as_a_clock_time_is_an_error_not_90_seconds():
    text = "apiVersion: switchyard/v1\nkind: Task\nname: a\nproject: p\ncommand: [x]\n"
    error = the_error(parse_document(text + "walltime: 1:30\n", max_bytes=MAX), "walltime")
    assert error.got == "1:30"


@pytest.mark.parametrize("as_bytes", [True, False])
def test_it_rejects_a_10_mb_document_by_size(as_bytes: bool):
    text = "a: " + "x" * 10_000_000
    start = time.perf_counter()
    error = document_error(text.encode() if as_bytes else text)
    assert time.perf_counter() - start < 1.0
    assert f"{MAX} bytes" in error.message
    assert "10000003 bytes" in error.message
    assert error.got == 10_000_003


def test_size_counts_utf8_bytes_not_characters():
    text = "a: " + "é" * 60
    assert document_error(text, max_bytes=100).got == 123
    assert parse_document(text, max_bytes=123) == {"a": "é" * 60}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: 1\nb: x\x00y\n", "NUL character at line 2, column 5"),
        (b"a: 1\nb: x\x00y\n", "NUL character at line 2, column 5"),
        ("a: 1\r\nb: 2\r\n", "carriage return (CR) at line 1, column 5"),
        (b'{"a":\r\n 1}', "carriage return (CR) at line 1, column 6"),
        ("a: 1\rb: 2", "Unix (LF) line endings"),
    ],
)
def test_it_rejects_nul_and_cr_and_says_where(text: str | bytes, fragment: str):
    assert fragment in document_error(text).message


def test_invalid_utf8_is_rejected_with_its_line():
    error = document_error(b"a: 1\nb: \xff\n")
    assert "not valid UTF-8" in error.message
    assert "0xff at line 2" in error.message


def test_a_string_with_a_lone_surrogate_is_rejected():
    assert "unpaired surrogate at line 1, column 4" in document_error("a: \ud800").message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"a": 1,}', "invalid JSON at line 1, column 9"),
        ('{\n  "a": [1,\n', "invalid JSON at line 3"),
        ('{"a": NaN}', "NaN is not valid JSON"),
        ('{"a": 1, "a": 2}', 'duplicate key "a"'),
        ("a: [1,\n", "invalid YAML at line 2, column 1"),
        ("a: 1\n b: 2\n", "invalid YAML at line 2"),
        ("a: 1\na: 2\n", 'invalid YAML at line 2, column 1: duplicate key "a"'),
        ("? [a]\n: 1\n", "mapping keys must be plain scalars"),
        ("a: 1\n---\nb: 2\n", "more than one YAML document"),
    ],
)
def test_broken_documents_are_rejected_with_line_and_column(text: str, fragment: str):
    assert fragment in document_error(text).message


@pytest.mark.parametrize(
    ("text", "got"),
    [("- 1\n- 2\n", "list"), ("just text\n", "str"), ("[1]", "list"), ("42", "int")],
)
def test_the_top_level_must_be_a_mapping(text: str, got: str):
    error = document_error(text)
    assert "must be a mapping" in error.message
    assert error.got == got


@pytest.mark.parametrize("text", ["", "   \n", "# only a comment\n", "---\n"])
def test_an_empty_document_is_rejected(text: str):
    assert "empty" in document_error(text).message


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 40 + "]" * 40,
        "a: " + "{b: " * 40 + "1" + "}" * 40,
        "[" * 200_000,
        '{"a": ' + "[" * 40 + "]" * 40 + "}",
        '{"a": ' * 100_000 + "1" + "}" * 100_000,
    ],
)
def test_nesting_is_capped(text: str):
    start = time.perf_counter()
    error = document_error(text, max_bytes=2_000_000)
    assert time.perf_counter() - start < 1.0
    assert "nested more than 32 levels deep" in error.message


def test_nesting_up_to_the_cap_is_fine():
    assert parse_document('{"a": ' + "[" * 31 + "]" * 31 + "}", max_bytes=MAX)
    assert parse_document("a: " + "[" * 31 + "]" * 31, max_bytes=MAX)


# --- error shape ----------------------------------------------------------------------------
BAD_INPUTS = [
    doc(resources={"gpus": "eight", "memory": float("nan"), "cpus": float("inf")}),
    doc(name={"deep": [1, {"x": list(range(1000))}]}),
    doc(name="x" * 10_000, project=b"bytes", queue=object()),
    doc(env={"A": 10**100, "B": ["x"] * 500, "C": 1.5}),
    doc(depends_on=[None, 3.5, {"a": 1}, 2**80]),
    doc(walltime=float("-inf"), estimate=[1, 2], wait_timeout={"x": 1}),
    {**doc(command=[None, b"x", ("t",)]), "é" * 200: 1, 5: "int key"},
    doc(trigger={"file": None, ("t",): 1}),
    doc(kind=None, apiVersion=None, name=None, project=None, command=None),
    doc(kind=["Task"]),
]


@pytest.mark.parametrize("data", BAD_INPUTS)
def test_every_error_is_json_serialisable(data: dict[str, Any]):
    errors = errors_of(data)
    assert errors
    for error in errors:
        as_dict = error.as_dict()
        assert set(as_dict) == {"field", "message", "got"}
        json.dumps(as_dict, allow_nan=False)
        if isinstance(error.got, str):
            assert len(error.got) <= 80
        assert error.field is None or len(error.field) <= 100


def test_field_error_sanitises_got_whoever_builds_it():
    assert FieldError("x", "m", float("nan")).got == "nan"
    assert FieldError("x", "m", {"a": 1}).as_dict() == {
        "field": "x",
        "message": "m",
        "got": "{'a': 1}",
    }
    assert FieldError(None, "m").as_dict() == {"field": None, "message": "m", "got": None}


def test_document_errors_have_no_field():
    with pytest.raises(DescriptorError) as info:
        load_task("a: [", max_bytes=MAX)
    assert [e.field for e in info.value.errors] == [None]
    json.dumps([e.as_dict() for e in info.value.errors])


def test_parse_task_refuses_a_non_mapping():
    assert "must be a mapping" in errors_of(["a"])[0].message


# --- JSON Schema ----------------------------------------------------------------------------
def test_the_schema_is_plain_json():
    assert json.loads(json.dumps(DESCRIPTOR_JSON_SCHEMA)) == DESCRIPTOR_JSON_SCHEMA


def _validator():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(DESCRIPTOR_JSON_SCHEMA)
    return jsonschema.Draft202012Validator(DESCRIPTOR_JSON_SCHEMA)


def test_the_schema_accepts_what_the_parser_accepts():
    validator = _validator()
    for data in (
        parse_document(FULL_YAML, max_bytes=MAX),
        doc(),
        doc(command=None, script="echo hi", queue=None, resources={"memory": 4096}),
    ):
        parse_task(data)
        assert list(validator.iter_errors(data)) == []


@pytest.mark.parametrize(
    "changes",
    [
        {"resources": {"gpus": "eight"}},
        {"resources": {"gpu": 1}},
        {"resources": {"cpus": True}},
        {"bogus": 1},
        {"name": "Bad_Name"},
        {"kind": "Workflow"},
        {"script": "echo"},
        {"command": _DROP},
        {"command": None},
        {"command": ["", "x"]},
        {"env": {"LD_PRELOAD": "x"}},
        {"env": {"SLURM_JOB_ID": "1"}},
        {"env": {"lower": "x"}},
        {"env": {"A": 1}},
        {"env": {"A": "x\ny"}},
        {"walltime": "soon"},
        {"walltime": 0},
        {"resources": {"memory": "1.5G"}},
        {"depends_on": ["a", "a"]},
        {"trigger": {"file": "../READY"}},
        {"workdir": "runs//1"},
        {"priority": "urgent"},
        {"retry_count": 11},
    ],
)
def test_the_schema_rejects_what_the_parser_rejects(changes: dict[str, Any]):
    validator = _validator()
    data = doc(**changes)
    errors_of(data)
    assert list(validator.iter_errors(data)) != []


# --- speed ----------------------------------------------------------------------------------
def test_a_small_json_descriptor_is_parsed_quickly():
    text = json.dumps(
        doc(resources={"gpus": 1, "memory": "16Gi"}, walltime="2h", env={"OMP_NUM_THREADS": "1"})
    )
    load_task(text, max_bytes=MAX)
    runs = 2000
    start = time.perf_counter()
    for _ in range(runs):
        load_task(text, max_bytes=MAX)
    per_call = (time.perf_counter() - start) / runs
    # The target is well under 100 µs; the bound has headroom for a busy CI machine.
    assert per_call < 500e-6
