"""Task descriptor v1: the parser's own defences against hostile documents."""

from __future__ import annotations

import time
from typing import Any

import pytest

from scheduling.descriptor import (
    parse_document,
)
from tests.unit.scheduling.descriptor.helpers import (
    MAX,
    document_error,
    the_error,
)


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
        ('{"name": "\\ud800"}', "escape in name (\\ud800)"),
        ('{"env": {"A": ["x", "\\udfff"]}}', "escape in env.A[1] (\\udfff)"),
        ('{"env": {"\\ud800B": "x"}}', "escape in a key of env (\\ud800B)"),
        ('{"\\ud83d": 1}', "escape in a key (\\ud83d)"),
    ],
)
def test_a_json_escape_of_half_a_surrogate_pair_is_rejected_and_never_echoed(text, fragment):
    error = document_error(text)
    assert fragment in error.message
    error.message.encode("utf-8")  # printable: an answer can carry it


def test_a_json_escape_of_a_whole_surrogate_pair_is_its_character():
    assert parse_document('{"name": "\\ud83d\\ude00", "b": "\\\\ud800"}', max_bytes=MAX) == {
        "name": "\U0001f600",
        "b": "\\ud800",  # an escaped backslash, then text
    }


def test_a_yaml_integer_beyond_pythons_digit_limit_is_refused_not_a_crash():
    assert "an integer of 4301 digits" in document_error("retry_count: " + "1" * 4301).message


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
