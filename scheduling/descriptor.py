"""Descriptor v1: parse a YAML or JSON document and validate it into a TaskSpec (`kind: Task`)
or a WorkflowSpec (`kind: Workflow`).

One validation serves the browser form, the REST API and file upload (DESIGN "Task descriptor
v1"). It runs in two stages:

- `parse_document` turns bytes or text into a plain dict and guards the parser itself: size,
  encoding, NUL and CR, YAML anchors/aliases/tags, nesting depth, duplicate keys.
- `parse_task` checks every field of that dict and collects *every* error before raising, so a
  user fixes a descriptor in one round trip. `parse_workflow` does the same for a workflow:
  each entry of `tasks` is a task body (field paths `tasks[2].resources.gpus`), then the DAG
  is checked (duplicate names, unknown or self dependencies, cycles). `load_descriptor`
  dispatches on `kind`.

Each error carries the dotted field (`resources.gpus`, `command[2]`, `env.FOO`), a message that
says what was expected, and the value got, already made JSON-safe, so it maps 1:1 onto the
API's error shape `{"field", "message", "got"}`.
"""

from __future__ import annotations

import difflib
import heapq
import json
import math
import re
import reprlib
from dataclasses import dataclass
from typing import Any

import yaml

from scheduling.spec import (
    FAIL_ACTIONS,
    PRIORITIES,
    TASK_TYPES,
    Resources,
    TaskSpec,
    WorkflowSpec,
)

__all__ = [
    "DESCRIPTOR_JSON_SCHEMA",
    "MAX_WORKFLOW_EDGES",
    "MAX_WORKFLOW_TASKS",
    "DescriptorError",
    "FieldError",
    "dependants",
    "load_descriptor",
    "load_task",
    "parse_descriptor",
    "parse_document",
    "parse_duration",
    "parse_size",
    "parse_task",
    "parse_workflow",
    "topological_order",
]

API_VERSION = "switchyard/v1"
KIND = "Task"
WORKFLOW_KIND = "Workflow"
_ENDPOINTS = {
    KIND: ("single tasks", "/api/v1/tasks/"),
    WORKFLOW_KIND: ("workflows", "/api/v1/workflows/"),
}

# A workflow's size is capped before any of its tasks is validated, so a huge one is refused
# in the time it takes to count it. Not settings: the DAG code and the schema rely on them.
MAX_WORKFLOW_TASKS = 1000
MAX_WORKFLOW_EDGES = 20_000  # depends_on entries (names and ids) over all tasks

# --- limits ---------------------------------------------------------------------------------
# The absurd-value caps are not site policy (queues and nodes decide what fits); they stop
# typos like `cpus: 1000000` and keep every number far from overflow in the backends.
_MAX_DEPTH = 32  # a descriptor nests 3 levels; deep nesting is only ever an attack
_MAX_NAME = 63  # Slurm job names, DNS labels and the SlugFields all fit 63
_MAX_CPUS = 100_000
_MAX_GPUS = 10_000
_MAX_NODES = 10_000
_MAX_MEMORY_MIB = 64 * 1024 * 1024  # 64 TiB per node
_MAX_DURATION_S = 365 * 86400
_MAX_RETRIES = 10
_MAX_ARG_CHARS = 4096
_MAX_COMMAND_ARGS = 4096
_MAX_SCRIPT_BYTES = 64 * 1024
_MAX_ENV = 128
_MAX_ENV_NAME = 255
_MAX_ENV_VALUE = 4096
_MAX_DEPENDS = 1000
_MAX_TASK_ID = 2**53 - 1
_MAX_HINTS = 10  # "did you mean" suggestions per workflow for unknown dependencies  # exact in every JSON client, and within a PostgreSQL bigint
_MAX_PATH = 4096
_MAX_IMAGE = 512
_GOT_CHARS = 80

# --- patterns -------------------------------------------------------------------------------
# Shared by the checks (always with fullmatch, so `$` cannot match before a trailing newline)
# and the JSON Schema (ECMA-262 regexes), so both accept exactly the same text.
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$"
SLUG_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"
GPU_TYPE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
IMAGE_PATTERN = r"^[A-Za-z0-9/][A-Za-z0-9._:/@+-]*$"
ENV_NAME_PATTERN = r"^[A-Z_][A-Z0-9_]*$"
DURATION_PATTERN = r"^([0-9]+|(?=[0-9])([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?)$"
SIZE_PATTERN = r"^[0-9]+(Ki|Mi|Gi|Ti|K|M|G|T)?$"
_NO_NUL_CR = r"^[^\r\u0000]*$"
_NO_NUL_CR_LF = r"^[^\n\r\u0000]*$"

_NAME_RE = re.compile(NAME_PATTERN)
_SLUG_RE = re.compile(SLUG_PATTERN)
_GPU_TYPE_RE = re.compile(GPU_TYPE_PATTERN)
_IMAGE_RE = re.compile(IMAGE_PATTERN)
_ENV_NAME_RE = re.compile(ENV_NAME_PATTERN)
_DURATION_RE = re.compile(
    r"(?P<plain>[0-9]+)|(?:(?P<d>[0-9]+)d)?(?:(?P<h>[0-9]+)h)?(?:(?P<m>[0-9]+)m)?(?:(?P<s>[0-9]+)s)?"
)
_SIZE_RE = re.compile(r"(?P<n>[0-9]+)(?P<unit>Ki|Mi|Gi|Ti|K|M|G|T)?")

_NAME_RULE = (
    "must be 1-63 characters of lower-case letters, digits and hyphens, "
    "starting and ending with a letter or digit"
)
_SLUG_RULE = (
    "must be 1-63 characters of letters, digits, hyphens and underscores, "
    "starting with a letter or digit"
)
_DURATION_RULE = (
    "must be a duration such as 90s, 30m, 48h, 1h30m or 1d12h "
    "(units d, h, m, s, largest first; a plain number is seconds)"
)
_SIZE_RULE = (
    "must be a size such as 512Gi, 64G or 1024Mi (Ki, Mi, Gi, Ti are powers of 1024; "
    "K, M, G, T are powers of 1000; a plain number is MiB)"
)
_SIZE_UNITS = {
    None: 2**20,  # a plain number is MiB
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}

# --- environment denylist -------------------------------------------------------------------
# The job runs with `--export=NONE` plus the descriptor's env (DESIGN, reliability notes), so
# these names are the ones that would let a descriptor change *how* the job is started or
# what it is allowed to touch, rather than just configure the user's own program.
_ENV_RESERVED_PREFIXES: tuple[tuple[str, str], ...] = (
    ("LD_", "the dynamic loader reads LD_* to load extra code into every program"),
    ("DYLD_", "the dynamic loader reads DYLD_* to load extra code into every program"),
    ("SLURM_", "Slurm sets SLURM_* to describe the allocation; a user value would lie to the job"),
    ("SBATCH_", "Slurm reads SBATCH_* as options; they would override the portal's choices"),
    ("SALLOC_", "Slurm reads SALLOC_* as options; they would override the portal's choices"),
    ("SRUN_", "Slurm reads SRUN_* as options; they would override the portal's choices"),
    ("SWITCHYARD_", "SWITCHYARD_* is reserved for the portal"),
    ("APPTAINER", "the container runtime reads these for binds and image options"),
    ("SINGULARITY", "the container runtime reads these for binds and image options"),
)
_ENV_RESERVED_PREFIX_TUPLE = tuple(prefix for prefix, _ in _ENV_RESERVED_PREFIXES)
_ENV_RESERVED_NAMES: dict[str, str] = {
    **dict.fromkeys(
        ("PATH", "HOME", "USER", "LOGNAME", "SHELL"),
        "the site sets the job's identity and search path for its account",
    ),
    **dict.fromkeys(
        (
            "BASH_ENV",
            "ENV",
            "IFS",
            "CDPATH",
            "GLOBIGNORE",
            "PS4",
            "PROMPT_COMMAND",
            "SHELLOPTS",
            "BASHOPTS",
        ),
        "it changes how the job's shell starts or parses the generated script",
    ),
    **dict.fromkeys(
        (
            "PYTHONPATH",
            "PYTHONHOME",
            "PYTHONSTARTUP",
            "PERL5LIB",
            "PERL5OPT",
            "RUBYOPT",
            "NODE_OPTIONS",
            "GCONV_PATH",
        ),
        "it makes the site's own wrapper and helper programs load foreign code",
    ),
    **dict.fromkeys(
        (
            "CUDA_VISIBLE_DEVICES",
            "NVIDIA_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES",
            "HIP_VISIBLE_DEVICES",
            "GPU_DEVICE_ORDINAL",
        ),
        "the scheduler assigns GPUs; this would reach GPUs not allocated to the task",
    ),
}

_TOP_FIELDS = (
    "apiVersion", "kind", "name", "project", "type", "queue", "resources", "walltime",
    "estimate", "command", "script", "image", "env", "depends_on", "retry_count",
    "fail_action", "wait_timeout", "trigger", "priority",
)  # fmt: skip
_RESOURCE_FIELDS = ("nodes", "cpus", "memory", "gpus", "gpu_type")
_TRIGGER_FIELDS = ("file",)
_HEADER_FIELDS = ("apiVersion", "kind")
# A task inside a workflow: the header is set once on the workflow; project is optional.
_WORKFLOW_TASK_FIELDS = tuple(f for f in _TOP_FIELDS if f not in _HEADER_FIELDS)
_WORKFLOW_FIELDS = ("apiVersion", "kind", "name", "project", "tasks")
_ALLOWED_SETS = {
    f: frozenset(f)
    for f in (
        _TOP_FIELDS,
        _RESOURCE_FIELDS,
        _TRIGGER_FIELDS,
        _WORKFLOW_TASK_FIELDS,
        _WORKFLOW_FIELDS,
    )
}


# --- errors ---------------------------------------------------------------------------------
_repr = reprlib.Repr()
_repr.maxlevel = 2
_repr.maxstring = _GOT_CHARS
_repr.maxother = _GOT_CHARS
_repr.maxlist = _repr.maxdict = _repr.maxtuple = _repr.maxset = 8


def _short(text: str) -> str:
    return text if len(text) <= _GOT_CHARS else text[: _GOT_CHARS - 3] + "..."


def _jsonable(value: Any) -> Any:
    """`value` as something json.dumps takes and a client can show: scalars as they are
    (long strings cut), anything else (containers, dates, NaN, huge ints) as a short repr."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return _short(value)
    if isinstance(value, int):
        # JavaScript clients lose precision past 2**53; such a number is an error anyway.
        return value if abs(value) < 2**53 else _short(str(value))
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return _short(_repr.repr(value))


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str | None  # dotted path, e.g. "resources.gpus", "command[2]"; None: the document
    message: str
    got: Any = None

    def __post_init__(self) -> None:
        # Sanitised here, once, so every error is safe to serialise whoever built it.
        object.__setattr__(self, "got", _jsonable(self.got))

    def as_dict(self) -> dict[str, Any]:
        return {"field": self.field, "message": self.message, "got": self.got}

    def __str__(self) -> str:
        where = self.field or "descriptor"
        got = "" if self.got is None else f", got {json.dumps(self.got, ensure_ascii=False)}"
        return f"{where}: {self.message}{got}"


class DescriptorError(Exception):
    """The descriptor is refused; `errors` lists every problem found."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


# --- stage 1: document ----------------------------------------------------------------------
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


def _document_error(message: str, got: Any = None) -> DescriptorError:
    return DescriptorError([FieldError(None, message, got)])


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
    return data


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
            return int(value.replace("_", ""))
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


# --- stage 2: fields ------------------------------------------------------------------------
def load_task(text: str | bytes, *, fmt: str | None = None, max_bytes: int) -> TaskSpec:
    """Parse and validate a `kind: Task` descriptor; raises DescriptorError listing every problem."""
    return parse_task(parse_document(text, fmt=fmt, max_bytes=max_bytes))


def load_descriptor(
    text: str | bytes, *, fmt: str | None = None, max_bytes: int
) -> TaskSpec | WorkflowSpec:
    """Parse and validate a descriptor of either kind (dispatch on `kind`)."""
    return parse_descriptor(parse_document(text, fmt=fmt, max_bytes=max_bytes))


def parse_descriptor(data: dict) -> TaskSpec | WorkflowSpec:
    """`parse_task` or `parse_workflow`, chosen by the mapping's `kind`."""
    if not isinstance(data, dict):
        raise _document_error("the descriptor must be a mapping of fields", type(data).__name__)
    kind = data.get("kind")
    if kind == WORKFLOW_KIND:
        return parse_workflow(data)
    if kind == KIND:
        return parse_task(data)
    expected = f'must be "{KIND}" or "{WORKFLOW_KIND}"'
    if kind is not None:
        errors: list[FieldError] = []
        _check_version(data, errors)
        _add(errors, "kind", expected, kind)
        raise DescriptorError(errors)
    # No kind: check it as the kind it looks like, so the other errors are reported too.
    parse = parse_workflow if "tasks" in data else parse_task
    try:
        parse(data)
    except DescriptorError as exc:
        errors = [
            FieldError("kind", f"is required; {expected}") if e.field == "kind" else e
            for e in exc.errors
        ]
        raise DescriptorError(errors) from None
    raise AssertionError("unreachable: both parsers require kind")  # pragma: no cover


def parse_task(data: dict) -> TaskSpec:
    """Validate a descriptor's mapping into a TaskSpec, or raise DescriptorError with all errors.

    An optional field given as null counts as not given (forms and YAML's `key:` send that).
    A single task's `depends_on` takes task ids only: it has no siblings to name.
    """
    if not isinstance(data, dict):
        raise _document_error("the descriptor must be a mapping of fields", type(data).__name__)
    errors: list[FieldError] = []
    if not _check_header(data, errors, KIND):
        # Another kind has other fields: checking them as a Task would only add noise.
        raise DescriptorError(errors)
    _check_unknown(data, _TOP_FIELDS, "", errors)
    values = _task_values(data, errors, in_workflow=False)
    if errors:
        raise DescriptorError(errors)
    return TaskSpec(**values)


def _task_values(data: dict, errors: list[FieldError], *, in_workflow: bool) -> dict[str, Any]:
    """TaskSpec's fields from a task body; `errors` gets what is wrong. In a workflow the
    project is the workflow's and is not among them (the caller checks and sets it).

    `name` and `depends_on` hold what could be read even when other fields are wrong, so a
    workflow can still check its DAG.
    """
    get = data.get
    name = _required(get("name"), "name", _NAME_RE, _MAX_NAME, _NAME_RULE, errors)
    values: dict[str, Any] = {"name": name}
    if not in_workflow:
        values["project"] = _required(
            get("project"), "project", _SLUG_RE, _MAX_NAME, _SLUG_RULE, errors
        )
    task_type = _optional_choice(get("type"), "type", TASK_TYPES, None, errors)
    queue = _optional_match(get("queue"), "queue", _SLUG_RE, _MAX_NAME, _SLUG_RULE, errors)
    resources = _resources(get("resources"), errors)
    walltime = _optional_duration(get("walltime"), "walltime", errors)
    estimate = _optional_duration(get("estimate"), "estimate", errors)
    wait_timeout = _optional_duration(get("wait_timeout"), "wait_timeout", errors)
    if walltime is not None and estimate is not None and estimate > walltime:
        _add(
            errors,
            "estimate",
            f"must not be longer than walltime ({get('walltime')})",
            get("estimate"),
        )
    command, script = _program(get("command"), get("script"), errors)
    image = _optional_match(
        get("image"),
        "image",
        _IMAGE_RE,
        _MAX_IMAGE,
        "must be a container image such as nvcr.io/nvidia/pytorch:24.01-py3 or an absolute "
        "path to an image file (letters, digits and . _ : / @ + -)",
        errors,
    )
    env = _env(get("env"), errors)
    depends_on, depends_on_ids = _depends_on(
        get("depends_on"), name, errors, names_allowed=in_workflow
    )
    retry_count = _optional_int(get("retry_count"), "retry_count", 0, _MAX_RETRIES, 0, errors)
    fail_action = _optional_choice(get("fail_action"), "fail_action", FAIL_ACTIONS, "abort", errors)
    trigger_file = _trigger(get("trigger"), errors)
    priority = _optional_choice(get("priority"), "priority", PRIORITIES, "normal", errors)
    return {
        **values,
        "resources": resources,
        "type": task_type,
        "queue": queue,
        "walltime_s": walltime,
        "estimate_s": estimate,
        "command": command,
        "script": script,
        "image": image,
        "env": env,
        "depends_on": depends_on,
        "depends_on_ids": depends_on_ids,
        "retry_count": retry_count,
        "fail_action": fail_action,
        "wait_timeout_s": wait_timeout,
        "trigger_file": trigger_file,
        "priority": priority,
    }


def _add(errors: list[FieldError], field: str | None, message: str, got: Any = None) -> None:
    errors.append(FieldError(field, message, got))


def _path(prefix: str, key: Any) -> str:
    return f"{prefix}{_short(key if isinstance(key, str) else str(key))}"


def _check_version(data: dict, errors: list[FieldError]) -> None:
    version = data.get("apiVersion")
    if version is None:
        _add(errors, "apiVersion", f'is required; must be "{API_VERSION}"')
    elif version != API_VERSION:
        _add(errors, "apiVersion", f'must be "{API_VERSION}"', version)


def _check_header(data: dict, errors: list[FieldError], expected: str) -> bool:
    """Check apiVersion and kind; False when the document is some other kind than `expected`."""
    _check_version(data, errors)
    kind = data.get("kind")
    if kind is None:
        _add(errors, "kind", f'is required; must be "{expected}"')
        return True
    if kind == expected:
        return True
    if isinstance(kind, str) and kind in _ENDPOINTS:
        what, endpoint = _ENDPOINTS[kind]
        _add(
            errors,
            "kind",
            f'"{kind}" is not supported here: this endpoint takes kind: {expected}; '
            f"send {what} to {endpoint}",
            kind,
        )
    else:
        _add(errors, "kind", f'must be "{expected}"', kind)
    return False


def _check_unknown(
    data: dict, allowed: tuple[str, ...], prefix: str, errors: list[FieldError]
) -> None:
    if data.keys() <= _ALLOWED_SETS[allowed]:  # the usual case, checked in C
        return
    for key, value in data.items():
        if key in allowed:
            continue
        hint = ""
        if isinstance(key, str):
            lowered = {a.lower(): a for a in allowed}
            close = difflib.get_close_matches(key.lower(), lowered, n=1, cutoff=0.6)
            hint = f" (did you mean {lowered[close[0]]}?)" if close else ""
        _add(
            errors,
            _path(prefix, key),
            f"unknown field{hint}; expected one of {', '.join(allowed)}",
            value,
        )


# scalars ------------------------------------------------------------------------------------
def _required(
    value: Any, field: str, regex: re.Pattern, max_len: int, rule: str, errors: list[FieldError]
) -> Any:
    if value is None:
        _add(errors, field, f"is required; {rule}")
        return None
    return _optional_match(value, field, regex, max_len, rule, errors)


def _optional_match(
    value: Any, field: str, regex: re.Pattern, max_len: int, rule: str, errors: list[FieldError]
) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and len(value) <= max_len and regex.fullmatch(value):
        return value
    too_long = isinstance(value, str) and len(value) > max_len
    _add(errors, field, f"must be at most {max_len} characters" if too_long else rule, value)
    return None


def _optional_choice(
    value: Any, field: str, choices: tuple[str, ...], default: str | None, errors: list[FieldError]
) -> Any:
    if value is None:
        return default
    if isinstance(value, str) and value in choices:
        return value
    _add(errors, field, f"must be one of {', '.join(choices)}", value)
    return default


def _int_hint(value: Any) -> str:
    """A nudge for the commonest near-miss: a number written as text."""
    digits = value.lstrip("+-") if isinstance(value, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        return ""
    return " (without leading zeros)" if len(digits) > 1 and digits[0] == "0" else " (not quoted)"


def _int(value: Any, field: str, lo: int, hi: int, errors: list[FieldError]) -> int | None:
    # `type(...) is int`: bool is a subclass of int, and `cpus: true` must not mean 1.
    if type(value) is not int or value < lo:
        _add(errors, field, f"must be an integer >= {lo}{_int_hint(value)}", value)
        return None
    if value > hi:
        _add(errors, field, f"must be an integer <= {hi}", value)
        return None
    return value


def _optional_int(
    value: Any, field: str, lo: int, hi: int, default: int | None, errors: list[FieldError]
) -> int | None:
    return default if value is None else _int(value, field, lo, hi, errors)


def parse_duration(value: Any) -> int:
    """Seconds in `value`: an integer (seconds) or text like 90s, 30m, 48h, 1h30m, 1d12h, 2d.

    Raises ValueError, with a message that says what is expected, for anything else, for
    zero or negative durations, and for more than 365 days.
    """
    if type(value) is int:
        seconds = value
    elif isinstance(value, str):
        if not value:
            raise ValueError(f"must not be empty; {_DURATION_RULE}")
        if value[0] == "-":
            raise ValueError("must be longer than 0 seconds")
        # The length guard keeps int() away from thousands of digits; no valid duration is long.
        match = _DURATION_RE.fullmatch(value) if len(value) <= 40 else None
        if match is None:
            raise ValueError(_DURATION_RULE)
        plain, days, hours, minutes, secs = match.groups()
        if plain is not None:
            seconds = int(plain)
        else:
            seconds = (
                int(days or 0) * 86400
                + int(hours or 0) * 3600
                + int(minutes or 0) * 60
                + int(secs or 0)
            )
    else:
        raise ValueError(_DURATION_RULE)
    if seconds <= 0:
        raise ValueError("must be longer than 0 seconds")
    if seconds > _MAX_DURATION_S:
        raise ValueError(f"must be at most 365d ({_MAX_DURATION_S} seconds)")
    return seconds


def parse_size(value: Any) -> int:
    """MiB in `value`: an integer (MiB) or text like 512Gi, 64G, 1024Mi, 1Ti, 500K.

    Binary units Ki, Mi, Gi, Ti are powers of 1024; decimal units K, M, G, T are powers of
    1000 (64G = 64 * 10**9 bytes = 61036 MiB, rounded up). Raises ValueError for anything
    else, for 0, and for more than 64 TiB.
    """
    if type(value) is int:
        mib = value
    elif isinstance(value, str):
        match = _SIZE_RE.fullmatch(value) if len(value) <= 24 else None
        if match is None:
            raise ValueError(_SIZE_RULE)
        size_bytes = int(match["n"]) * _SIZE_UNITS[match["unit"]]
        mib = -(-size_bytes // 2**20)  # round up: never give a task less than it asked for
    else:
        raise ValueError(_SIZE_RULE)
    if mib <= 0:
        raise ValueError("must be greater than 0")
    if mib > _MAX_MEMORY_MIB:
        raise ValueError(f"must be at most 64Ti ({_MAX_MEMORY_MIB} MiB)")
    return mib


def _optional_duration(value: Any, field: str, errors: list[FieldError]) -> int | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        _add(errors, field, str(exc), value)
        return None


# resources ----------------------------------------------------------------------------------
def _resources(value: Any, errors: list[FieldError]) -> Resources | None:
    if value is None:
        return Resources()
    if not isinstance(value, dict):
        _add(
            errors, "resources", f"must be a mapping with keys {', '.join(_RESOURCE_FIELDS)}", value
        )
        return None
    before = len(errors)
    _check_unknown(value, _RESOURCE_FIELDS, "resources.", errors)
    get = value.get
    cpus = _optional_int(get("cpus"), "resources.cpus", 1, _MAX_CPUS, 1, errors)
    gpus = _optional_int(get("gpus"), "resources.gpus", 0, _MAX_GPUS, 0, errors)
    nodes = _optional_int(get("nodes"), "resources.nodes", 1, _MAX_NODES, None, errors)
    memory = 1024
    if get("memory") is not None:
        try:
            memory = parse_size(get("memory"))
        except ValueError as exc:
            _add(errors, "resources.memory", str(exc), get("memory"))
    gpu_type = _optional_match(
        get("gpu_type"),
        "resources.gpu_type",
        _GPU_TYPE_RE,
        _MAX_NAME,
        "must be a GPU model name of letters, digits and . _ - (e.g. a100, h100-80gb)",
        errors,
    )
    if nodes is not None:
        # cpus and gpus are totals for the task: each node must get the same share.
        for field, total, given in (("cpus", cpus, "cpus" in value), ("gpus", gpus, True)):
            if total is not None and total % nodes:
                _add(
                    errors,
                    f"resources.{field}",
                    f"must divide evenly by resources.nodes ({nodes}); it is the total "
                    f"for the task{'' if given else ', and defaults to 1'}",
                    total,
                )
    if len(errors) > before:
        return None
    return Resources(cpus=cpus, memory_mib=memory, gpus=gpus, nodes=nodes, gpu_type=gpu_type)


# program ------------------------------------------------------------------------------------
def _program(
    command: Any, script: Any, errors: list[FieldError]
) -> tuple[tuple[str, ...] | None, str | None]:
    if command is None and script is None:
        _add(errors, None, "exactly one of command or script is required; got neither")
        return None, None
    if command is not None and script is not None:
        _add(errors, None, "exactly one of command or script is required; got both")
        return None, None
    if command is not None:
        return _command(command, errors), None
    return None, _script(script, errors)


def _command(value: Any, errors: list[FieldError]) -> tuple[str, ...] | None:
    if isinstance(value, str):
        _add(
            errors,
            "command",
            'must be a list of strings, e.g. ["python", "train.py"]; for a shell line use script',
            value,
        )
        return None
    if not isinstance(value, list) or not value:
        _add(errors, "command", "must be a non-empty list of strings", value)
        return None
    if len(value) > _MAX_COMMAND_ARGS:
        _add(errors, "command", f"must have at most {_MAX_COMMAND_ARGS} arguments", len(value))
        return None
    if _command_ok(value):
        return tuple(value)
    before = len(errors)
    for index, arg in enumerate(value):
        field = f"command[{index}]"
        if not isinstance(arg, str):
            _add(errors, field, "expected a string, quote it", arg)
        elif len(arg) > _MAX_ARG_CHARS:
            _add(errors, field, f"must be at most {_MAX_ARG_CHARS} characters", arg)
        elif "\x00" in arg or "\r" in arg:
            _add(errors, field, "must not contain a NUL or carriage return character", arg)
        elif index == 0 and not arg:
            _add(errors, field, "must not be empty: it is the program to run", arg)
    return tuple(value) if len(errors) == before else None


def _command_ok(args: list[Any]) -> bool:
    if not all(type(arg) is str for arg in args):
        return False
    joined = "".join(args)
    return (
        args[0] != ""
        and "\x00" not in joined
        and "\r" not in joined
        and max(map(len, args)) <= _MAX_ARG_CHARS
    )


def _script(value: Any, errors: list[FieldError]) -> str | None:
    if not isinstance(value, str) or not value.strip():
        _add(errors, "script", "must be a non-empty string (a shell script body)", value)
        return None
    size = len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if size > _MAX_SCRIPT_BYTES:
        _add(errors, "script", f"must be at most {_MAX_SCRIPT_BYTES} bytes; it is {size}", value)
    elif "\x00" in value:
        _add(errors, "script", "must not contain a NUL character", value)
    elif "\r" in value:
        _add(errors, "script", "must not contain a carriage return; use LF line endings", value)
    else:
        return value
    return None


# env ----------------------------------------------------------------------------------------
def _env_reserved(name: str) -> str | None:
    """Why `name` may not be set by a descriptor, or None when it may."""
    reason = _ENV_RESERVED_NAMES.get(name)
    if reason is not None or not name.startswith(_ENV_RESERVED_PREFIX_TUPLE):
        return reason
    for prefix, reason in _ENV_RESERVED_PREFIXES:
        if name.startswith(prefix):
            return reason
    return None


def _env(value: Any, errors: list[FieldError]) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        _add(errors, "env", "must be a mapping of variable names to string values", value)
        return ()
    if len(value) > _MAX_ENV:
        _add(errors, "env", f"must have at most {_MAX_ENV} variables", len(value))
        return ()
    before = len(errors)
    for name, text in value.items():
        field = _path("env.", name)
        if (
            not isinstance(name, str)
            or len(name) > _MAX_ENV_NAME
            or not _ENV_NAME_RE.fullmatch(name)
        ):
            _add(
                errors,
                field,
                "is not a valid variable name: upper-case letters, digits and _, "
                f"not starting with a digit (pattern {ENV_NAME_PATTERN})",
                name,
            )
            continue
        reason = _env_reserved(name)
        if reason is not None:
            _add(errors, field, f"is reserved: {reason}", name)
        elif not isinstance(text, str):
            _add(errors, field, "expected a string, quote it", text)
        elif len(text) > _MAX_ENV_VALUE:
            _add(errors, field, f"must be at most {_MAX_ENV_VALUE} characters", text)
        elif "\n" in text or "\r" in text or "\x00" in text:
            _add(errors, field, "must not contain a newline or NUL character", text)
    if len(errors) > before:
        return ()
    # Sorted: the same canonical order TaskSpec.from_dict produces, so round trips compare equal.
    return tuple(sorted(value.items()))


# workflow fields ----------------------------------------------------------------------------
def _depends_on(
    value: Any, own_name: str | None, errors: list[FieldError], *, names_allowed: bool
) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(names, ids) in `value`: a string is a task name, an integer (not a bool) a task id."""
    if value is None:
        return (), ()
    if not isinstance(value, list):
        _add(errors, "depends_on", "must be a list of task names or task ids", value)
        return (), ()
    if len(value) > _MAX_DEPENDS:
        _add(errors, "depends_on", f"must have at most {_MAX_DEPENDS} entries", len(value))
        return (), ()
    seen: dict[str | int, int] = {}
    names: list[str] = []
    ids: list[int] = []
    for index, item in enumerate(value):
        field = f"depends_on[{index}]"
        is_id = type(item) is int
        if is_id and item > _MAX_TASK_ID:
            _add(errors, field, f"is not a task id: ids are at most {_MAX_TASK_ID}", item)
            continue
        if not (
            (is_id and item >= 1)
            or (isinstance(item, str) and len(item) <= _MAX_NAME and _NAME_RE.fullmatch(item))
        ):
            _add(
                errors,
                field,
                "must be a task name (lower-case letters, digits and hyphens) "
                "or a task id (an integer >= 1)",
                item,
            )
            continue
        if item in seen:
            _add(errors, field, f"duplicate of depends_on[{seen[item]}]", item)
            continue
        seen[item] = index
        if is_id:
            ids.append(item)
        elif item == own_name:
            _add(errors, field, f"task '{item}' cannot depend on itself", item)
        elif not names_allowed:
            _add(
                errors,
                field,
                "a single task has no siblings to depend on; use a Workflow, or give a task id",
                item,
            )
        else:
            names.append(item)
    return tuple(names), tuple(ids)


def _trigger(value: Any, errors: list[FieldError]) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        _add(errors, "trigger", "must be a mapping like {file: /absolute/path/READY}", value)
        return None
    _check_unknown(value, _TRIGGER_FIELDS, "trigger.", errors)
    path = value.get("file")
    if path is None:
        _add(errors, "trigger.file", "is required: the absolute path of the file to wait for")
        return None
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or len(path) > _MAX_PATH
        or "\x00" in path
        or "\r" in path
        or "\n" in path
    ):
        _add(
            errors,
            "trigger.file",
            f"must be an absolute path (starting with /, at most {_MAX_PATH} characters, one line)",
            path,
        )
        return None
    if "/.." in path and ".." in path.split("/"):
        _add(errors, "trigger.file", "must not contain .. components", path)
        return None
    return path


# --- workflows ------------------------------------------------------------------------------
def parse_workflow(data: dict) -> WorkflowSpec:
    """Validate a `kind: Workflow` mapping into a WorkflowSpec, or raise DescriptorError.

    Every error is collected: the workflow's own fields, each task's fields (as
    `tasks[2].resources.gpus`), then the DAG (duplicate names, unknown dependencies, cycles).
    The task and dependency counts are checked first, so an oversized workflow is refused
    without validating any of its tasks.
    """
    if not isinstance(data, dict):
        raise _document_error("the descriptor must be a mapping of fields", type(data).__name__)
    errors: list[FieldError] = []
    if not _check_header(data, errors, WORKFLOW_KIND):
        raise DescriptorError(errors)
    _check_unknown(data, _WORKFLOW_FIELDS, "", errors)
    name = _required(data.get("name"), "name", _NAME_RE, _MAX_NAME, _NAME_RULE, errors)
    project = _required(data.get("project"), "project", _SLUG_RE, _MAX_NAME, _SLUG_RULE, errors)
    entries = data.get("tasks")
    if not _check_sizes(entries, errors):
        raise DescriptorError(errors)

    tasks: list[TaskSpec | None] = []
    names: list[str | None] = []  # valid names, by index
    for index, entry in enumerate(entries):
        spec, task_name = _workflow_task(index, entry, data.get("project"), project, errors)
        tasks.append(spec)
        names.append(task_name)
    # depends_on names as read, even for tasks with other errors, so the DAG is still checked.
    _check_dag(entries, tasks, names, errors)

    if errors:
        raise DescriptorError(errors)
    return WorkflowSpec(name=name, project=project, tasks=tuple(t for t in tasks if t is not None))


def _check_sizes(entries: Any, errors: list[FieldError]) -> bool:
    """False when `tasks` cannot be checked task by task (missing, not a list, too big)."""
    limit = MAX_WORKFLOW_TASKS
    if entries is None:
        _add(errors, "tasks", f"is required: a list of 1 to {limit} tasks")
        return False
    if not isinstance(entries, list):
        _add(errors, "tasks", f"must be a list of 1 to {limit} tasks", entries)
        return False
    if not entries:
        _add(errors, "tasks", "must have at least one task", entries)
        return False
    if len(entries) > limit:
        _add(errors, "tasks", f"must have at most {limit} tasks, got {len(entries)}")
        return False
    edges = sum(
        len(deps)
        for entry in entries
        if isinstance(entry, dict) and isinstance(deps := entry.get("depends_on"), list)
    )
    if edges > MAX_WORKFLOW_EDGES:
        _add(
            errors,
            "tasks",
            f"must have at most {MAX_WORKFLOW_EDGES} depends_on entries in all, got {edges}",
        )
        return False
    return True


def _workflow_task(
    index: int,
    entry: Any,
    raw_project: Any,
    project: str | None,
    errors: list[FieldError],
) -> tuple[TaskSpec | None, str | None]:
    """One entry of `tasks`: its spec (None when wrong) and its name (None when invalid)."""
    prefix = f"tasks[{index}]"
    if not isinstance(entry, dict):
        _add(errors, prefix, "must be a mapping of task fields (name, command, ...)", entry)
        return None, None
    own: list[FieldError] = []
    body = entry
    if "apiVersion" in entry or "kind" in entry:
        for key in _HEADER_FIELDS:
            if key in entry:
                _add(own, key, "is set once on the workflow, not on each task", entry[key])
        body = {k: v for k, v in entry.items() if k not in _HEADER_FIELDS}
    _check_unknown(body, _WORKFLOW_TASK_FIELDS, "", own)
    task_project = entry.get("project")
    if task_project is not None and task_project != raw_project and project is not None:
        _add(
            own,
            "project",
            f'must be the workflow\'s project "{project}" or left out: '
            "every task of a workflow belongs to its project",
            task_project,
        )
    values = _task_values(body, own, in_workflow=True)
    for error in own:
        field = f"{prefix}.{error.field}" if error.field else prefix
        errors.append(FieldError(field, error.message, error.got))
    spec = None if own or project is None else TaskSpec(project=project, **values)
    return spec, values["name"]


def _check_dag(
    entries: list[Any],
    tasks: list[TaskSpec | None],
    names: list[str | None],
    errors: list[FieldError],
) -> None:
    """Duplicate names, unknown dependencies and cycles, each error naming the tasks."""
    first: dict[str, int] = {}  # name -> index of its first use
    for index, task_name in enumerate(names):
        if task_name is None:
            continue
        if task_name in first:
            _add(
                errors,
                f"tasks[{index}].name",
                f"duplicate task name '{task_name}': tasks[{first[task_name]}] already has it",
                task_name,
            )
        else:
            first[task_name] = index
    # Names that were given but are invalid already have an error; don't call them unknown.
    written = {
        entry["name"]
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    }
    successors: list[list[int]] = [[] for _ in names]  # edges dependency -> dependant
    hints: dict[str, str] = {}
    for index, entry in enumerate(entries):
        task_name = names[index]
        # Only a task whose name is valid and first used is a node of the graph.
        is_node = task_name is not None and first[task_name] == index
        for position, dep in _dependency_names(entry, tasks[index], task_name):
            target = first.get(dep)
            if target is None:
                if dep not in written:
                    _add(
                        errors,
                        f"tasks[{index}].depends_on[{position}]",
                        _unknown_message(task_name, dep, first, hints),
                        dep,
                    )
            elif is_node and target != index:
                successors[target].append(index)
    for cycle in _cycles(successors):
        _add(errors, "tasks", "cycle: " + _cycle_text([str(names[i]) for i in cycle]))


def _dependency_names(
    entry: Any, spec: TaskSpec | None, task_name: str | None
) -> list[tuple[int, str]]:
    """(position in depends_on, name) of each valid dependency name of one entry."""
    if spec is not None:
        if not spec.depends_on:
            return []
        wanted = set(spec.depends_on)
        return [(i, d) for i, d in enumerate(entry["depends_on"]) if type(d) is str and d in wanted]
    # The task has errors: reread its depends_on leniently (valid, distinct, not itself).
    deps = entry.get("depends_on") if isinstance(entry, dict) else None
    if not isinstance(deps, list) or len(deps) > _MAX_DEPENDS:
        return []
    found: list[tuple[int, str]] = []
    seen: set[str] = set()
    for position, dep in enumerate(deps):
        if (
            isinstance(dep, str)
            and dep not in seen
            and dep != task_name
            and len(dep) <= _MAX_NAME
            and _NAME_RE.fullmatch(dep)
        ):
            seen.add(dep)
            found.append((position, dep))
    return found


def _unknown_message(
    task_name: str | None, dep: str, known: dict[str, int], hints: dict[str, str]
) -> str:
    # difflib costs ~15 µs per known name: a hostile document of 20,000 unknown names against
    # 1000 tasks would take minutes, so only the first few distinct names get a suggestion.
    hint = hints.get(dep)
    if hint is None:
        hint = ""
        if len(hints) < _MAX_HINTS:
            close = difflib.get_close_matches(dep, known, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
        hints[dep] = hint
    who = f"task '{task_name}': " if task_name else ""
    return f"{who}no task named '{dep}' in this workflow{hint}"


def _cycle_text(cycle: list[str]) -> str:
    """`a → b → c → a`: each task waits for the one before it; long cycles are shortened."""
    shown = cycle if len(cycle) <= 12 else [*cycle[:10], "…", cycle[-1]]
    text = " → ".join([*shown, cycle[0]])
    if len(cycle) > 12:
        text += f" ({len(cycle)} tasks)"
    return text


def _cycles(successors: list[list[int]]) -> list[list[int]]:
    """One cycle per strongly connected component with more than one node, each as a list of
    node indices starting at the component's first node, in the order of the edges; the
    components in order of their first node. Iterative Tarjan, then one BFS per component:
    O(V + E), no recursion."""
    count = len(successors)
    order = [-1] * count  # discovery index
    low = [0] * count
    on_stack = [False] * count
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in range(count):
        if order[root] != -1:
            continue
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, 0)]
        while work:
            node, edge = work[-1]
            if edge < len(successors[node]):
                work[-1] = (node, edge + 1)
                nxt = successors[node][edge]
                if order[nxt] == -1:
                    order[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, 0))
                elif on_stack[nxt] and order[nxt] < low[node]:
                    low[node] = order[nxt]
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[node] < low[parent]:
                    low[parent] = low[node]
            if low[node] == order[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    cycles = [_cycle_through(min(c), set(c), successors) for c in components]
    cycles.sort(key=lambda cycle: cycle[0])
    return cycles


def _cycle_through(start: int, members: set[int], successors: list[list[int]]) -> list[int]:
    """A shortest cycle through `start` inside its strongly connected component (BFS)."""
    parent = {start: start}
    queue = [start]
    for node in queue:  # the list grows while it is read: a FIFO without popping
        for nxt in successors[node]:
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if nxt in members and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError("a strongly connected component without a cycle")  # pragma: no cover


# DAG helpers for the service and the workflow page -----------------------------------------
def _graph(spec: WorkflowSpec) -> tuple[list[str], list[list[int]], list[int]]:
    """Names, successors (dependency -> dependants, in document order) and in-degrees."""
    names = [task.name for task in spec.tasks]
    index = {name: i for i, name in enumerate(names)}
    if len(index) != len(names):
        raise ValueError("the workflow has duplicate task names")
    successors: list[list[int]] = [[] for _ in names]
    indegree = [0] * len(names)
    for i, task in enumerate(spec.tasks):
        for dep in dict.fromkeys(task.depends_on):
            j = index.get(dep)
            if j is None or j == i:
                raise ValueError(f"task {task.name!r} depends on {dep!r}, which is not a sibling")
            successors[j].append(i)
            indegree[i] += 1
    return names, successors, indegree


def topological_order(spec: WorkflowSpec) -> list[str]:
    """Task names, every task after the tasks it depends on; ties in document order.

    Only names count: ids of existing tasks are outside the workflow. Raises ValueError for a
    spec that `parse_workflow` would refuse (cycle, unknown or duplicate names).
    """
    names, successors, indegree = _graph(spec)
    ready = [i for i, degree in enumerate(indegree) if degree == 0]  # sorted: a valid heap
    order: list[str] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(names[node])
        for nxt in successors[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                heapq.heappush(ready, nxt)
    if len(order) != len(names):
        raise ValueError("the workflow has a cycle")
    return order


def dependants(spec: WorkflowSpec) -> dict[str, list[str]]:
    """For every task name, the names of the tasks that depend on it directly, in document
    order (an empty list for a task nothing depends on)."""
    names, successors, _ = _graph(spec)
    return {name: [names[i] for i in successors[n]] for n, name in enumerate(names)}


# --- JSON Schema ----------------------------------------------------------------------------
def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    # parse_task treats null as "not given" for every optional field.
    return {"anyOf": [schema, {"type": "null"}]}


def _pattern_string(pattern: str, max_length: int, description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": pattern,
        "maxLength": max_length,
        "description": description,
    }


_DURATION_SCHEMA: dict[str, Any] = {
    "oneOf": [
        {"type": "integer", "minimum": 1, "maximum": _MAX_DURATION_S, "description": "seconds"},
        {"type": "string", "pattern": DURATION_PATTERN, "maxLength": 40},
    ],
    "description": _DURATION_RULE.removeprefix("must be ") + "; at most 365d",
}

_NAME_SCHEMA = _pattern_string(NAME_PATTERN, _MAX_NAME, _NAME_RULE.removeprefix("must be "))
_PROJECT_SCHEMA = _pattern_string(SLUG_PATTERN, _MAX_NAME, "the project's slug")
_TASK_ID_SCHEMA = {
    "type": "integer",
    "minimum": 1,
    "maximum": _MAX_TASK_ID,
    "description": "the id of an existing task",
}


def _depends_on_schema(*, names: bool) -> dict[str, Any]:
    item = (
        {"anyOf": [_pattern_string(NAME_PATTERN, _MAX_NAME, "a task name"), _TASK_ID_SCHEMA]}
        if names
        else _TASK_ID_SCHEMA
    )
    return _nullable(
        {
            "type": "array",
            "maxItems": _MAX_DEPENDS,
            "uniqueItems": True,
            "items": item,
            "description": (
                "names of tasks in this workflow, or ids of existing tasks"
                if names
                else "ids of existing tasks (a single task has no siblings to name)"
            ),
        }
    )


# The fields of a task body, shared by kind Task and the entries of a workflow's tasks.
_TASK_BODY_PROPERTIES: dict[str, Any] = {
    "name": _NAME_SCHEMA,
    "type": _nullable({"enum": list(TASK_TYPES)}),
    "queue": _nullable(_pattern_string(SLUG_PATTERN, _MAX_NAME, "a queue's name")),
    "resources": _nullable(
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "nodes": _nullable({"type": "integer", "minimum": 1, "maximum": _MAX_NODES}),
                "cpus": _nullable(
                    {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": _MAX_CPUS,
                        "default": 1,
                        "description": "total for the task; divisible by nodes",
                    }
                ),
                "memory": _nullable(
                    {
                        "oneOf": [
                            {"type": "integer", "minimum": 1, "maximum": _MAX_MEMORY_MIB},
                            {"type": "string", "pattern": SIZE_PATTERN, "maxLength": 22},
                        ],
                        "default": "1Gi",
                        "description": "per node; " + _SIZE_RULE.removeprefix("must be "),
                    }
                ),
                "gpus": _nullable(
                    {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": _MAX_GPUS,
                        "default": 0,
                        "description": "total for the task; divisible by nodes",
                    }
                ),
                "gpu_type": _nullable(
                    _pattern_string(GPU_TYPE_PATTERN, _MAX_NAME, "GPU model, e.g. a100")
                ),
            },
        }
    ),
    "walltime": _nullable({**_DURATION_SCHEMA, "description": "hard run-time limit"}),
    "estimate": _nullable({**_DURATION_SCHEMA, "description": "expected run time"}),
    "wait_timeout": _nullable(
        {**_DURATION_SCHEMA, "description": "cancel if still waiting on dependencies"}
    ),
    "command": _nullable(
        {
            "type": "array",
            "minItems": 1,
            "maxItems": _MAX_COMMAND_ARGS,
            "prefixItems": [{"type": "string", "minLength": 1}],
            "items": {"type": "string", "maxLength": _MAX_ARG_CHARS, "pattern": _NO_NUL_CR},
            "description": "argv of the program to run (no shell)",
        }
    ),
    "script": _nullable(
        {
            "type": "string",
            "minLength": 1,
            "maxLength": _MAX_SCRIPT_BYTES,
            "allOf": [{"pattern": "\\S"}, {"pattern": _NO_NUL_CR}],
            "description": f"a shell script body, at most {_MAX_SCRIPT_BYTES} bytes of UTF-8",
        }
    ),
    "image": _nullable(_pattern_string(IMAGE_PATTERN, _MAX_IMAGE, "container image")),
    "env": _nullable(
        {
            "type": "object",
            "maxProperties": _MAX_ENV,
            "propertyNames": {
                "pattern": ENV_NAME_PATTERN,
                "maxLength": _MAX_ENV_NAME,
                "not": {
                    "anyOf": [
                        {"enum": sorted(_ENV_RESERVED_NAMES)},
                        {"pattern": "^(" + "|".join(p for p, _ in _ENV_RESERVED_PREFIXES) + ")"},
                    ]
                },
            },
            "additionalProperties": {
                "type": "string",
                "maxLength": _MAX_ENV_VALUE,
                "pattern": _NO_NUL_CR_LF,
            },
        }
    ),
    "depends_on": _depends_on_schema(names=True),
    "retry_count": _nullable(
        {"type": "integer", "minimum": 0, "maximum": _MAX_RETRIES, "default": 0}
    ),
    "fail_action": _nullable({"enum": list(FAIL_ACTIONS), "default": "abort"}),
    "trigger": _nullable(
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["file"],
            "properties": {
                "file": {
                    "type": "string",
                    "pattern": "^/[^\\n\\r\\u0000]*$",
                    "maxLength": _MAX_PATH,
                    "description": "absolute path; the task is released when it exists",
                }
            },
        }
    ),
    "priority": _nullable({"enum": list(PRIORITIES), "default": "normal"}),
}
# Exactly one of command / script, counting null as absent.
_ONE_PROGRAM = [
    {"required": ["command"], "properties": {"command": {"type": "array"}}},
    {"required": ["script"], "properties": {"script": {"type": "string"}}},
]

DESCRIPTOR_JSON_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "/api/v1/descriptor-schema/",
    "title": "Switchyard descriptor v1 (kind: Task or kind: Workflow)",
    "description": (
        "A single task, or a workflow of tasks. Checks a schema cannot express are made by the "
        "server: in a workflow, task names are unique, depends_on names exist and form no "
        "cycle, and a task's project, when given, is the workflow's."
    ),
    "type": "object",
    "required": ["kind"],
    # The top level lists every field either kind may have (kind: Task's, plus `tasks`), so a
    # client reading `properties` sees them all; `then` / `else` hold each kind's exact rules.
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": API_VERSION},
        "kind": {"enum": [KIND, WORKFLOW_KIND]},
        "project": _PROJECT_SCHEMA,
        **_TASK_BODY_PROPERTIES,
        "tasks": {"$ref": "#/$defs/workflow/properties/tasks"},
    },
    "if": {"required": ["kind"], "properties": {"kind": {"const": WORKFLOW_KIND}}},
    "then": {"$ref": "#/$defs/workflow"},
    "else": {"$ref": "#/$defs/task"},
    "$defs": {
        "task": {
            "title": "kind: Task",
            "type": "object",
            "additionalProperties": False,
            "required": ["apiVersion", "kind", "name", "project"],
            "properties": {
                "apiVersion": {"const": API_VERSION},
                "kind": {"const": KIND},
                "project": _PROJECT_SCHEMA,
                **_TASK_BODY_PROPERTIES,
                "depends_on": _depends_on_schema(names=False),
            },
            "oneOf": _ONE_PROGRAM,
        },
        "workflowTask": {
            "title": "a task of a workflow (no apiVersion or kind: they are set on the workflow)",
            "type": "object",
            "additionalProperties": False,
            "required": ["name"],
            "properties": {
                "project": {**_PROJECT_SCHEMA, "description": "the workflow's project, if given"},
                **_TASK_BODY_PROPERTIES,
            },
            "oneOf": _ONE_PROGRAM,
        },
        "workflow": {
            "title": "kind: Workflow",
            "type": "object",
            "additionalProperties": False,
            "required": ["apiVersion", "kind", "name", "project", "tasks"],
            "properties": {
                "apiVersion": {"const": API_VERSION},
                "kind": {"const": WORKFLOW_KIND},
                "name": _NAME_SCHEMA,
                "project": _PROJECT_SCHEMA,
                "tasks": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": MAX_WORKFLOW_TASKS,
                    "items": {"$ref": "#/$defs/workflowTask"},
                },
            },
        },
    },
}
