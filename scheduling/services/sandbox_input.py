"""What a live-sandbox request asks, checked (docs/sandboxes.md): every error names its
field, what was expected and what was got."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from portal.errors import ApplicationError
from scheduling.decisions.sandboxes import host_port_problem
from scheduling.spec import TaskSpec

MAX_ARGS, MAX_ARGV_BYTES, MAX_ENV = 1024, 128 * 1024, 256
MAX_EXEC_TIMEOUT_S = 3600
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def int_field(data: dict, name: str, default: int, lo: int, hi: int | None) -> int:
    value = data.get(name)
    if value is None:
        return default
    if type(value) is not int or value < lo or (hi is not None and value > hi):
        span = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
        raise ApplicationError(f"expected an integer {span}", field=name, got=value)
    return value


def network(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, dict) or set(value) - {"allow"}:
        raise ApplicationError('expected {"allow": ["host:port", ...]}', field="network", got=value)
    allow = value.get("allow") or []
    if not isinstance(allow, list) or len(allow) > 64:
        raise ApplicationError(
            'expected a list of at most 64 "host:port"', field="network.allow", got=allow
        )
    for i, item in enumerate(allow):
        if why := host_port_problem(item):
            raise ApplicationError(f"expected {why}", field=f"network.allow[{i}]", got=item)
    return list(dict.fromkeys(allow))


@dataclass(frozen=True, slots=True)
class ExecAsk:
    """An exec request, validated."""

    argv: list[str]
    stdin: bytes
    env: dict[str, str]
    cwd: str | None
    timeout_s: float
    binary: bool  # the answer's output in base64 (`stdout_b64`) rather than text


def known_object(data: Any, fields: frozenset[str]) -> None:
    """A request body must be a JSON object of these fields only; the error names the first
    field that is not one."""
    if not isinstance(data, dict):
        raise ApplicationError("expected a JSON object", field=None, got=type(data).__name__)
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ApplicationError(
            f"unknown field; expected one of {', '.join(sorted(fields))}",
            field=unknown[0],
            got=unknown[0],
        )


def exec_ask(data: Any) -> ExecAsk:
    """The API's exec body checked: {"command": [argv], "stdin" | "stdin_b64", "env", "cwd",
    "timeout", "binary"}; every error names its field."""
    known_object(data, _EXEC_FIELDS)
    argv = data.get("command")
    if (
        not isinstance(argv, list)
        or not 1 <= len(argv) <= MAX_ARGS
        or not all(isinstance(a, str) and "\0" not in a for a in argv)
        or not argv[0]
    ):
        raise ApplicationError(
            f"expected a list of 1 to {MAX_ARGS} strings (argv, no shell), the first not empty",
            field="command",
            got=argv if not isinstance(argv, list) else f"{len(argv)} items",
        )
    if sum(len(a.encode()) for a in argv) > MAX_ARGV_BYTES:
        raise ApplicationError(f"at most {MAX_ARGV_BYTES} bytes in all", field="command")
    stdin = _stdin(data)
    env = data.get("env") or {}
    if not isinstance(env, dict) or len(env) > MAX_ENV:
        raise ApplicationError(f"expected an object of at most {MAX_ENV} names", field="env")
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name) or not isinstance(value, str) or "\0" in value:
            raise ApplicationError(
                "expected NAME (letters, digits, _) → a string", field=f"env.{name}", got=value
            )
    cwd = data.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd or "\0" in cwd or len(cwd) > 4096):
        raise ApplicationError("expected a path of at most 4096 characters", field="cwd", got=cwd)
    timeout = data.get("timeout", 60)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ApplicationError("expected seconds, a number", field="timeout", got=timeout)
    if not 0 < timeout <= MAX_EXEC_TIMEOUT_S:
        raise ApplicationError(
            f"expected seconds from 0 to {MAX_EXEC_TIMEOUT_S}", field="timeout", got=timeout
        )
    binary = data.get("binary", False)
    if not isinstance(binary, bool):
        raise ApplicationError("expected true or false", field="binary", got=binary)
    return ExecAsk(list(argv), stdin, dict(env), cwd, float(timeout), binary)


_EXEC_FIELDS = frozenset({"command", "stdin", "stdin_b64", "env", "cwd", "timeout", "binary"})


def _stdin(data: dict) -> bytes:
    text, b64 = data.get("stdin"), data.get("stdin_b64")
    if text is not None and b64 is not None:
        raise ApplicationError("give stdin or stdin_b64, not both", field="stdin_b64")
    limit = settings.SWITCHYARD_SANDBOX_FILE_MAX_BYTES
    if b64 is not None:
        try:
            raw = base64.b64decode(b64, validate=True) if isinstance(b64, str) else None
        except (binascii.Error, ValueError):
            raw = None
        if raw is None:
            raise ApplicationError("expected base64 text", field="stdin_b64", got=str(b64)[:40])
    elif text is not None:
        if not isinstance(text, str):
            raise ApplicationError("expected text", field="stdin", got=type(text).__name__)
        raw = text.encode()
    else:
        raw = b""
    if len(raw) > limit:
        raise ApplicationError(f"at most {limit} bytes", field="stdin", got=len(raw))
    return raw


# The backends whose batch tasks have no way to the sandbox API yet (no relay in their job):
# a task with `sandboxes: true` routed to one is refused at submission, by name.
NO_SANDBOX_API = {"scheduling.backends.slurm.SlurmBackend": "the Slurm backend"}


def batch_sandboxes_check(spec: TaskSpec, *, queue: str, backend: str, field: str) -> None:
    """A batch task that asks for live sandboxes (`sandboxes: true`) must run where a relay
    gives it the sandbox API (the local backend, docs/sandbox-network.md); else a 400 naming
    the backend."""
    name = NO_SANDBOX_API.get((settings.COMPUTE_BACKENDS.get(backend) or {}).get("BACKEND", ""))
    if spec.sandboxes and name:
        raise ApplicationError(
            f"queue {queue} runs on {name} ({backend}), whose jobs have no way to the sandbox "
            "API yet: submit a task with `sandboxes: true` to a queue on the local backend",
            field=field,
            got=True,
        )
