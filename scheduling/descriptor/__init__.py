"""Descriptor v1: parse a YAML or JSON document and validate it into a TaskSpec (`kind: Task`)
or a WorkflowSpec (`kind: Workflow`).

One validation serves the browser form, the REST API and file upload (docs/descriptor.md,
and docs/workflows.md for workflows). It runs in two stages:

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

from scheduling.descriptor.document import parse_document
from scheduling.descriptor.errors import DescriptorError, FieldError, _document_error
from scheduling.descriptor.fields import _add, _check_version, parse_duration, parse_size
from scheduling.descriptor.limits import (
    API_VERSION,
    DURATION_PATTERN,
    ENV_NAME_PATTERN,
    GPU_TYPE_PATTERN,
    IMAGE_PATTERN,
    KIND,
    MAX_WORKFLOW_EDGES,
    MAX_WORKFLOW_TASKS,
    NAME_PATTERN,
    SIZE_PATTERN,
    SLUG_PATTERN,
    SLUG_RULE,
    WORKFLOW_KIND,
    slug_problem,
)
from scheduling.descriptor.schema import DESCRIPTOR_JSON_SCHEMA
from scheduling.descriptor.task import parse_task
from scheduling.descriptor.workflow import parse_workflow, topological_order
from scheduling.spec import TaskSpec, WorkflowSpec

__all__ = [
    "API_VERSION",
    "DESCRIPTOR_JSON_SCHEMA",
    "DURATION_PATTERN",
    "ENV_NAME_PATTERN",
    "GPU_TYPE_PATTERN",
    "IMAGE_PATTERN",
    "KIND",
    "MAX_WORKFLOW_EDGES",
    "MAX_WORKFLOW_TASKS",
    "NAME_PATTERN",
    "SIZE_PATTERN",
    "SLUG_PATTERN",
    "SLUG_RULE",
    "WORKFLOW_KIND",
    "DescriptorError",
    "FieldError",
    "load_descriptor",
    "slug_problem",
    "load_task",
    "parse_descriptor",
    "parse_document",
    "parse_duration",
    "parse_size",
    "parse_task",
    "parse_workflow",
    "topological_order",
]


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
