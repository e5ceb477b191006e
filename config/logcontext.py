"""Where a log line comes from: the request, its user, the task and the job (docs/operations.md, "Logs").

One context per request or Celery task run, kept in a context variable: the middleware
`RequestLog` opens it for a request (its id from a well-formed `X-Request-ID`, else a new
one, and sent back in the answer's `X-Request-ID`), `config/celery.py` carries it in the
headers of every message published while it is open and opens it again in the worker that
runs the message. Code that knows the task or job it works on binds them (`bound`, or a log
call's `extra={"task_id": …, "job_id": …}`). `ContextFilter` (config/logformat.py) writes
the fields on every record.

The request being served is kept here too: the audit log reads who acts from it
(portal/audit.py). The user is read from it only once authentication has looked them up, so
a log line never queries the database (or fails when the database is down).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar, Token
from types import MappingProxyType
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.functional import SimpleLazyObject, empty
from django.utils.log import log_response

# The fields a line may carry, in this order; a field not known is left out.
FIELDS = ("request_id", "user", "task_id", "job_id")
HEADER = "X-Request-ID"
# A front's or a client's id is taken as it is when it looks like one (a UUID, a hex or
# base64url token): letters, digits and `-_.:`, 8 to 64 characters. Anything else — too
# long, a newline, a quote — is replaced, so a client cannot write into the log.
_WELL_FORMED = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{7,63}")

_context: ContextVar[Mapping[str, Any]] = ContextVar(
    "switchyard_log_context", default=MappingProxyType({})
)
# The HttpRequest being served, apart from the fields: never sent in a message.
_request: ContextVar[HttpRequest | None] = ContextVar("switchyard_request", default=None)


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_from(header: str | None) -> str:
    """The id a request is logged under: the one it came with, if well-formed; else a new one."""
    if header and _WELL_FORMED.fullmatch(header):
        return header
    return new_request_id()


def current_request() -> HttpRequest | None:
    return _request.get()


@contextlib.contextmanager
def serving(request: HttpRequest | None) -> Iterator[None]:
    """The request being served, inside this block (a signal handler given one)."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


def fields() -> dict[str, Any]:
    """The fields known here: those bound, and the user of the request being served."""
    known = dict(_context.get())
    if "user" not in known and (name := _user_name(_request.get())) is not None:
        known["user"] = name
    return known


def fields_for(task_id: Any, known: dict[str, Any]) -> dict[str, Any]:
    """`known` for a line about `task_id`: a message that carried many requests' tasks (a
    dispatch of tasks that several requests stored) names each task's own request."""
    origin = (known.get("origins") or {}).get(str(task_id))
    return {**known, **origin} if origin else known


def bind(**values: Any) -> Token:
    """Add these fields (None and "" are left out) until `unbind(token)`."""
    new = {k: v for k, v in values.items() if v is not None and v != ""}
    return _context.set({**_context.get(), **new})


def unbind(token: Token) -> None:
    _context.reset(token)


@contextlib.contextmanager
def bound(**values: Any) -> Iterator[None]:
    """These fields on every line logged inside the block."""
    token = bind(**values)
    try:
        yield
    finally:
        unbind(token)


@contextlib.contextmanager
def fresh(values: Mapping[str, Any]) -> Iterator[None]:
    """Exactly these fields inside the block, whatever was bound around it (a message run in
    the worker, a message sent later or by another thread for the request that asked)."""
    token = _context.set(dict(values))
    try:
        yield
    finally:
        _context.reset(token)


# What the worker adds about the message it runs: Celery's own name and id of it (its
# "received" and "succeeded" lines name that id).
WORKER_FIELDS = ("celery_task", "celery_id")


def outgoing() -> dict[str, Any]:
    """The fields a message published now carries to its worker (JSON values only)."""
    return {k: v for k, v in fields().items() if k not in WORKER_FIELDS}


def carried(task_ids: list[int], origins: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The fields of one message about these tasks, each stored by a request of its own
    (`origins`, as `outgoing` gave them): theirs if they share them, else each task's."""
    distinct = {tuple(sorted(origins.get(i, {}).items())) for i in task_ids}
    if len(distinct) == 1:
        return dict(origins.get(task_ids[0], {}))
    return {"origins": {str(i): dict(origins[i]) for i in task_ids if origins.get(i)}}


def _user_name(request: HttpRequest | None) -> str | None:
    if request is None:
        return None
    user = request.__dict__.get("user")
    if isinstance(user, SimpleLazyObject):
        # Not looked up unless authentication's cache holds it: a line never queries.
        wrapped = user._wrapped
        user = request.__dict__.get("_cached_user") if wrapped is empty else wrapped
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return user.get_username()


class RequestLog:
    """Middleware, near the first: the request's log context and its `X-Request-ID`.

    Django logs a 4xx or 5xx answer (`django.request`) after the last middleware has
    returned; this one logs it itself, inside the context, so that line has the ids too.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_from(request.META.get("HTTP_X_REQUEST_ID"))
        with fresh({"request_id": request_id}), serving(request):
            response = self.get_response(request)
            if response.status_code >= 400:
                log_response(
                    "%s: %s",
                    response.reason_phrase,
                    request.path,
                    response=response,
                    request=request,
                )
        response[HEADER] = request_id
        return response
