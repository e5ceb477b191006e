"""Submit again from a task: the submit form filled in as the task was submitted.

A task made from the form's fields stores the JSON descriptor the fields wrote
(`TaskSubmitForm.as_descriptor`); submitted again, it opens in those fields, its project
selected, rather than as a descriptor in the box. Any descriptor the fields could not have
written (other keys, a script, YAML) opens in the box as it was stored.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from scheduling.forms import MORE_FIELDS

_TOP = {"apiVersion", "kind", "name", "project", "resources", "command", "walltime", *MORE_FIELDS}
_RESOURCES = ("cpus", "gpus", "memory")
_TEXT = ("walltime", "type", "queue", "estimate", "workdir")


def form_fields(descriptor: str, fmt: str) -> dict[str, Any] | None:
    """The form's initial values for `descriptor`, or None when the fields cannot hold it."""
    if fmt != "json":
        return None
    try:
        doc = json.loads(descriptor)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("kind") != "Task" or not set(doc) <= _TOP:
        return None
    resources = doc.get("resources") or {}
    command = doc.get("command") or []
    inputs = doc.get("inputs") or []
    if (
        not isinstance(resources, dict)
        or not set(resources) <= set(_RESOURCES)
        or not _strings(command)
        or not _strings(inputs)
        or not all(isinstance(doc.get(key, ""), str) for key in ("name", "project", *_TEXT))
    ):
        return None
    fields: dict[str, Any] = {
        "name": doc.get("name", ""),
        "project": doc.get("project", ""),
        "command": shlex.join(command),
        "inputs": "\n".join(inputs),
    }
    # A field the task left empty stays empty: the form's defaults (10m, 1 CPU) are not the task's.
    fields.update({key: doc.get(key, "") for key in _TEXT})
    fields.update({key: resources.get(key, "") for key in _RESOURCES})
    return fields


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)
