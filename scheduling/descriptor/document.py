"""Stage 1: bytes or text to a plain dict. `parse_document` guards the parser itself (size,
encoding, NUL and CR, duplicate keys, nesting depth) and reads JSON, or YAML through our own
composer over libyaml's events (no anchors, aliases or foreign tags)."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from scheduling.descriptor.errors import DescriptorError, FieldError, _document_error, _short
from scheduling.descriptor.limits import _MAX_DEPTH


def parse_document(text: str | bytes, *, fmt: str | None = None, max_bytes: int) -> dict:
    """The descriptor's top-level mapping, from JSON or YAML text.

    `fmt` is "json", "yaml", or None to sniff (JSON when the first non-blank character is
    `{`). Raises DescriptorError (field None) for anything that is not a well-formed, small,
    plain mapping.
    """
    if fmt not in (None, "json", "yaml"):
        raise ValueError(f"fmt must be 'json', 'yaml' or None, not {fmt!r}")
    text = _decoded(text, max_bytes)
    if fmt is None:
        fmt = "json" if _JSON_START.match(text) else "yaml"
    data = _load_json(text) if fmt == "json" else _load_yaml(text)
    if data is None:
        raise _document_error("the descriptor is empty")
    if not isinstance(data, dict):
        raise _document_error(
            "the descriptor must be a mapping of fields (apiVersion, kind, name, ...)",
            type(data).__name__,
        )
    return data


_JSON_START = re.compile(r"\s*\{")


def _line_col(text: str, index: int) -> tuple[int, int]:
    line_start = text.rfind("\n", 0, index) + 1
    return text.count("\n", 0, index) + 1, index - line_start + 1


def _decoded(raw: str | bytes, max_bytes: int) -> str:
    """`raw` as text, after the checks that must run before any parser sees it."""
    if isinstance(raw, bytes | bytearray | memoryview):
        data = bytes(raw)
        _check_size(len(data), max_bytes)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise _document_error(
                f"the descriptor is not valid UTF-8: byte 0x{data[exc.start]:02x} at line {line} "
                f"(byte offset {exc.start})"
            ) from None
    elif isinstance(raw, str):
        text = raw
        if text.isascii():  # O(1) in CPython: length in characters is the length in bytes
            size = len(text)
        else:
            try:
                size = len(text.encode("utf-8"))
            except UnicodeEncodeError as exc:
                line, col = _line_col(text, exc.start)
                raise _document_error(
                    f"the descriptor is not valid Unicode: unpaired surrogate at line {line}, column {col}"
                ) from None
        _check_size(size, max_bytes)
    else:
        raise _document_error("the descriptor must be text", type(raw).__name__)
    # Editors on Windows prepend a byte-order mark; json.loads refuses it.
    text = text.removeprefix("\ufeff")
    errors = []
    for char, what, advice in (
        ("\x00", "a NUL character", "NUL is never valid in a descriptor"),
        ("\r", "a carriage return (CR)", "save the file with Unix (LF) line endings"),
    ):
        index = text.find(char)
        if index >= 0:
            line, col = _line_col(text, index)
            errors.append(
                FieldError(
                    None, f"the descriptor contains {what} at line {line}, column {col}; {advice}"
                )
            )
    if errors:
        raise DescriptorError(errors)
    return text


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise _document_error(
            f"the descriptor is {size} bytes; the limit is {max_bytes} bytes", size
        )


# JSON ---------------------------------------------------------------------------------------
class _Refused(Exception):
    """A well-formed document using a feature we refuse (duplicate key, alias, tag...)."""

    def __init__(self, message: str, mark: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.mark = mark


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # the last one would silently win: say so instead
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f'duplicate key "{_short(key)}"')
            seen.add(key)
    return obj


def _json_constant(name: str) -> Any:
    raise _Refused(f"{name} is not valid JSON (use a number or a string)")


def _load_json(text: str) -> Any:
    try:
        data = json.loads(text, object_pairs_hook=_json_object, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise _document_error(
            f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    except _Refused as exc:
        raise _document_error(f"invalid JSON: {exc.message}") from None
    except RecursionError:
        raise _document_error(
            f"the descriptor is nested more than {_MAX_DEPTH} levels deep"
        ) from None
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise _document_error(f"invalid JSON: {exc}") from None
    # Cheap pre-check: a document with few brackets cannot be deep, skip the walk.
    if text.count("{") + text.count("[") > _MAX_DEPTH and _depth(data) > _MAX_DEPTH:
        raise _document_error(f"the descriptor is nested more than {_MAX_DEPTH} levels deep")
    # An escape such as \ud800 decodes to half a surrogate pair: no character, which no
    # store, log or answer can encode. Only escapes make one (the text itself is UTF-8).
    if "\\u" in text and (where := _unpaired(data, "")) is not None:
        path, value = where
        raise _document_error(
            f"the descriptor is not valid Unicode: an unpaired surrogate escape in {path} "
            f"({_escaped(value)})"
        )
    return data


def _unpaired(data: Any, path: str) -> tuple[str, str] | None:
    """Where the first key or string of `data` holding an unpaired surrogate is, and it."""
    if isinstance(data, str):
        return None if _encodes(data) else (path or "the document", data)
    if isinstance(data, dict):
        for key, value in data.items():
            if not _encodes(key):
                return (f"a key of {path}" if path else "a key", key)
            found = _unpaired(value, f"{path}.{key}" if path else key)
            if found is not None:
                return found
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found = _unpaired(value, f"{path}[{index}]")
            if found is not None:
                return found
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _escaped(text: str) -> str:
    """`text` with every unpaired surrogate written as its escape (safe to print)."""
    return _short(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def _depth(data: Any) -> int:
    deepest = 0
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        if depth > deepest:
            deepest = depth
            if deepest > _MAX_DEPTH:
                break
        stack.extend((child, depth + 1) for child in value)
    return deepest


# YAML ---------------------------------------------------------------------------------------
# libyaml scans and parses (fast, in C); we read its events and build the data ourselves
# instead of using PyYAML's composer and constructor. That lets us refuse anchors and
# aliases at the first one seen (a "billion laughs" document is never expanded), refuse
# non-standard tags, count nesting depth without recursion, and catch duplicate keys.
_YamlLoader: type = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = _TAG + "map", _TAG + "seq"
_SCALAR_TAGS = frozenset({_STR, _INT, _FLOAT, _BOOL, _NULL})
_DECIMAL_RE = re.compile(r"[-+]?(0|[1-9][0-9_]*)")
_NO_KEY = object()


class _Frame:
    __slots__ = ("container", "key")

    def __init__(self, container: dict | list) -> None:
        self.container = container
        self.key: Any = _NO_KEY


def _load_yaml(text: str) -> Any:
    loader = _YamlLoader(text)
    try:
        return _compose_yaml(loader)
    except _Refused as exc:
        where = ""
        if exc.mark is not None:
            where = f" at line {exc.mark.line + 1}, column {exc.mark.column + 1}"
        raise _document_error(f"invalid YAML{where}: {exc.message}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "cannot be parsed"
        raise _document_error(f"invalid YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise _document_error(f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()


def _compose_yaml(loader: Any) -> Any:
    loader.get_event()  # StreamStart
    if loader.check_event(yaml.StreamEndEvent):
        return None
    loader.get_event()  # DocumentStart
    root: Any = None
    stack: list[_Frame] = []
    while True:
        event = loader.get_event()
        if isinstance(event, yaml.DocumentEndEvent):
            break
        if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            stack.pop()
            continue
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"aliases (*{event.anchor}) are not allowed", event.start_mark)
        if event.anchor is not None:
            raise _Refused(f"anchors (&{event.anchor}) are not allowed", event.start_mark)
        if isinstance(event, yaml.ScalarEvent):
            value: Any = _yaml_scalar(loader, event)
        else:
            value = _yaml_collection(event, len(stack))
        if not stack:
            root = value
        else:
            _yaml_attach(stack[-1], value, event)
        if not isinstance(event, yaml.ScalarEvent):
            stack.append(_Frame(value))
    if not loader.check_event(yaml.StreamEndEvent):
        raise _Refused(
            "more than one YAML document (remove the second ---)", loader.peek_event().start_mark
        )
    return root


def _yaml_collection(event: Any, depth: int) -> dict | list:
    if depth >= _MAX_DEPTH:
        raise _Refused(f"nested more than {_MAX_DEPTH} levels deep", event.start_mark)
    mapping = isinstance(event, yaml.MappingStartEvent)
    if event.tag not in (None, "!", _MAP if mapping else _SEQ):
        raise _Refused(f"the tag {event.tag} is not allowed", event.start_mark)
    return {} if mapping else []


def _yaml_attach(frame: _Frame, value: Any, event: Any) -> None:
    container = frame.container
    if isinstance(container, list):
        container.append(value)
    elif frame.key is _NO_KEY:
        if not isinstance(event, yaml.ScalarEvent):
            raise _Refused("mapping keys must be plain scalars", event.start_mark)
        if value in container:  # PyYAML would keep the last one silently
            raise _Refused(f'duplicate key "{_short(str(value))}"', event.start_mark)
        frame.key = value
    else:
        container[frame.key] = value
        frame.key = _NO_KEY


def _yaml_scalar(loader: Any, event: Any) -> Any:
    value: str = event.value
    tag = event.tag
    explicit = tag not in (None, "!")
    if explicit:
        if tag not in _SCALAR_TAGS:
            raise _Refused(f"the tag {tag} is not allowed", event.start_mark)
    else:
        tag = loader.resolve(yaml.ScalarNode, value, event.implicit)
    if tag == _STR:
        return value
    if tag == _NULL:
        return None
    if tag == _BOOL:
        try:
            return loader.bool_values[value.lower()]
        except KeyError:
            raise _Refused(f'"{_short(value)}" is not a boolean', event.start_mark) from None
    if tag == _INT:
        # YAML 1.1 reads 010 as octal 8, 0x10 as 16 and 1:30 as 90 (base 60): a silent trap
        # for `cpus: 010` or `walltime: 1:30`. Keep such text as a string so the field's own
        # check reports what was written.
        if _DECIMAL_RE.fullmatch(value):
            try:
                return int(value.replace("_", ""))
            except ValueError:  # beyond Python's limit of digits (4300)
                raise _Refused(f"an integer of {len(value)} digits", event.start_mark) from None
        if explicit:
            raise _Refused(f'"{_short(value)}" is not a decimal integer', event.start_mark)
        return value
    if tag == _FLOAT:
        if ":" in value:  # base-60 float, same trap as above
            if explicit:
                raise _Refused(f'"{_short(value)}" is not a number', event.start_mark)
            return value
        try:
            return loader.construct_yaml_float(yaml.ScalarNode(tag, value))
        except ValueError:
            raise _Refused(f'"{_short(value)}" is not a number', event.start_mark) from None
    # Timestamps, merge keys (<<), "=" ...: no field takes them; keep the text as written.
    return value
