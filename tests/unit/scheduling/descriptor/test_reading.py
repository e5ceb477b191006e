"""Task descriptor v1: good descriptors, durations and sizes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduling.descriptor import (
    load_task,
    parse_document,
    parse_duration,
    parse_size,
    parse_task,
)
from scheduling.spec import Resources, TaskSpec
from tests.unit.scheduling.descriptor.helpers import (
    FULL_SPEC,
    FULL_YAML,
    MAX,
    doc,
    document_error,
)


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
        egress=list(FULL_SPEC.egress),
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
