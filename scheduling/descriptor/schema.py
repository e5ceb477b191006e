"""DESCRIPTOR_JSON_SCHEMA: the JSON Schema (draft 2020-12) of both kinds, built from the same
limits and patterns the checks use, served at /api/v1/descriptor-schema/."""

from __future__ import annotations

from typing import Any

from scheduling.descriptor.limits import (
    _DURATION_RULE,
    _ENV_RESERVED_NAMES,
    _ENV_RESERVED_PREFIXES,
    _MAX_ARG_CHARS,
    _MAX_COMMAND_ARGS,
    _MAX_CPUS,
    _MAX_DEPENDS,
    _MAX_DURATION_S,
    _MAX_ENV,
    _MAX_ENV_NAME,
    _MAX_ENV_VALUE,
    _MAX_GPUS,
    _MAX_IMAGE,
    _MAX_INPUTS,
    _MAX_MEMORY_MIB,
    _MAX_NAME,
    _MAX_NODES,
    _MAX_PATH,
    _MAX_RETRIES,
    _MAX_SCRIPT_BYTES,
    _MAX_TASK_ID,
    _NAME_RULE,
    _NO_NUL_CR,
    _NO_NUL_CR_LF,
    _SIZE_RULE,
    API_VERSION,
    DURATION_PATTERN,
    ENV_NAME_PATTERN,
    GPU_TYPE_PATTERN,
    IMAGE_PATTERN,
    KIND,
    MAX_WORKFLOW_TASKS,
    NAME_PATTERN,
    SIZE_PATTERN,
    SLUG_PATTERN,
    WORKFLOW_KIND,
)
from scheduling.spec import FAIL_ACTIONS, NOTIFY, PRIORITIES, TASK_TYPES


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

# A path: absolute, or relative to the project's folder (names joined by single /, no "."),
# in either case with no ".." component.
_PATH_PATTERN = (
    r"^(?!.*(^|/)\.\.(/|$))"
    r"(/[^\n\r\u0000]*|(?!\.(/|$))[^/\n\r\u0000]+(/(?!\.(/|$))[^/\n\r\u0000]+)*)$"
)
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


# A task's environment: names a job may be given, values on one line.
_ENV: dict[str, Any] = {
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
    "env": _nullable(_ENV),
    # The same names and values as env; never shown back (docs/descriptor.md).
    "secret_env": _nullable(_ENV),
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
                    "pattern": _PATH_PATTERN,
                    "maxLength": _MAX_PATH,
                    "description": "absolute, or relative to the project's folder; the task "
                    "is released when it exists (inside a folder its jobs mount, or a trigger "
                    "root)",
                }
            },
        }
    ),
    "workdir": _nullable(
        {
            "type": "string",
            "pattern": _PATH_PATTERN,
            "maxLength": _MAX_PATH,
            "description": "where the job starts: inside a storage folder it mounts "
            "read-write, absolute or relative to the project's folder (absent: a folder of "
            "its own in its project's area)",
        }
    ),
    "inputs": _nullable(
        {
            "type": "array",
            "maxItems": _MAX_INPUTS,
            "items": {
                "type": "string",
                "pattern": "^/[^\\n\\r\\u0000]*[^/\\n\\r\\u0000]$",
                "maxLength": _MAX_PATH,
            },
            "description": "absolute paths of files or folders inside storage folders the job "
            "mounts; each is linked into the working folder under its own name before the "
            "command starts",
        }
    ),
    "priority": _nullable({"enum": list(PRIORITIES), "default": "normal"}),
    "notify": _nullable(
        {
            "enum": list(NOTIFY),
            "description": "end: mail the owner when the task ends; none: never; "
            "absent: the owner's setting",
        }
    ),
    "sandboxes": _nullable(
        {
            "type": "boolean",
            "default": False,
            "description": "true: the task gets SWITCHYARD_URL and SWITCHYARD_TOKEN, a token "
            "that may use only the live-sandbox API of its project until its walltime ends",
        }
    ),
}
# Exactly one of command / script, counting null as absent; or neither with an image (its
# own Entrypoint and Cmd run).
_COMMAND = {"required": ["command"], "properties": {"command": {"type": "array"}}}
_SCRIPT = {"required": ["script"], "properties": {"script": {"type": "string"}}}
_ONE_PROGRAM = [
    _COMMAND,
    _SCRIPT,
    {
        "required": ["image"],
        "properties": {"image": {"type": "string"}},
        "not": {"anyOf": [_COMMAND, _SCRIPT]},
    },
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
