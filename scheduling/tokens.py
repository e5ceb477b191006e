"""Scoped task tokens (docs/sandboxes.md, "From a batch task"): a batch task that asked for
sandbox access (`sandboxes: true`) gets a token that may use only the live-sandbox API of its
own project, until its walltime ends, and only while the task runs.

The token is signed, not stored: the portal's secret key signs (task id, project, expiry),
so a copy of the database holds no usable token, and checking one costs no query beyond the
task's own state. It is handed to the job in its environment (as a secret value, never in
the stored spec), as `SWITCHYARD_TOKEN`, with `SWITCHYARD_URL`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.core import signing

PREFIX = "sytask."
_SALT = "switchyard.sandbox-task-token"


@dataclass(frozen=True, slots=True)
class TaskScope:
    """What a checked token allows: the sandbox API of `project`, for task `task_id`."""

    task_id: int
    project: str
    expires_at: float  # epoch seconds


def mint(task_id: int, project: str, *, lifetime_s: int, now: float | None = None) -> str:
    expires = int((now if now is not None else time.time()) + lifetime_s)
    value = signing.dumps({"t": task_id, "p": project, "e": expires}, salt=_SALT)
    return PREFIX + value


def is_task_token(text: str) -> bool:
    return text.startswith(PREFIX)


def check(text: str, *, now: float | None = None) -> TaskScope | None:
    """The token's scope, or None when it is not one this portal signed or it expired."""
    if not is_task_token(text):
        return None
    try:
        data = signing.loads(text[len(PREFIX) :], salt=_SALT)
    except signing.BadSignature:
        return None
    if not isinstance(data, dict):
        return None
    task_id, project, expires = data.get("t"), data.get("p"), data.get("e")
    if type(task_id) is not int or not isinstance(project, str) or type(expires) is not int:
        return None
    if expires <= (now if now is not None else time.time()):
        return None
    return TaskScope(task_id, project, float(expires))
