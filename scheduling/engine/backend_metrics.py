"""Every backend call timed, and its failures counted, by backend and operation
(`switchyard_backend_call_seconds`, `switchyard_backend_errors_total`; docs/operations.md).

The registry instruments each backend it builds: the operations below become attributes of
that one object which call the class's method (looked up at each call, so a test that
patches the class still reaches its patch) and record how long it took and how it failed.
A submit's per-job refusals (`submit_many` returns them in its list) count as errors too.
"""

from __future__ import annotations

import time
from typing import Any

from config.metrics import instruments
from scheduling.backends import Backend
from scheduling.backends.base import BackendError, BackendUnavailable, SessionGone

# The calls the engine makes; `submit` is `submit_many` of one, counted there.
OPERATIONS = (
    "submit_many",
    "find",
    "cancel",
    "poll",
    "nodes",
    "set_priority",
    "drain",
    "resume",
    "log",
    "health",
    "usage",
    "accounted",
    "apply_lease",
    "end_lease",
    "housekeep",
    "prepull",
    "image_caches",
    "claim_warm",
    "exec_in",
    "put_file",
    "get_file",
    "egress_audit",
    "keep_warm",
    "started",
)


def error_kind(exc: BaseException) -> str:
    if isinstance(exc, BackendUnavailable):
        return "unavailable"
    if isinstance(exc, SessionGone):
        return "gone"
    if isinstance(exc, BackendError):
        return "refused"
    return "exception"


def instrument(backend: Backend) -> Backend:
    """`backend`, its operations timed (nothing changes when metrics are off)."""
    if not instruments.enabled():
        return backend
    own = vars(backend)
    for name in OPERATIONS:
        if name not in own and callable(getattr(type(backend), name, None)):
            setattr(backend, name, _timed(backend, name))
    return backend


def _timed(backend: Backend, name: str):
    cls, alias = type(backend), backend.alias

    def call(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            result = getattr(cls, name)(backend, *args, **kwargs)
        except Exception as exc:
            instruments.backend_call(alias, name, time.perf_counter() - started, error_kind(exc))
            raise
        instruments.backend_call(alias, name, time.perf_counter() - started, None)
        if name == "submit_many":
            _count_refused_jobs(alias, result)
        return result

    call.__name__ = name
    return call


def _count_refused_jobs(alias: str, results: list) -> None:
    kinds: dict[str, int] = {}
    for result in results:
        if isinstance(result, BackendError):
            kind = error_kind(result)
            kinds[kind] = kinds.get(kind, 0) + 1
    for kind, n in kinds.items():
        instruments.backend_errors(alias, "submit_many", kind, n)
