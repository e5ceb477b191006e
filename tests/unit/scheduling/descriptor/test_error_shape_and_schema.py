"""Task descriptor v1: the error shape, the JSON Schema, and the parser's speed."""

from __future__ import annotations

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
    parse_task,
)
from tests.unit.scheduling.descriptor.helpers import (
    _DROP,
    FULL_YAML,
    MAX,
    doc,
    errors_of,
)

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
