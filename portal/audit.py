"""The audit log: who submitted, cancelled, approved, drained, lent or changed what (docs/console.md).

`record()` is called by the services that make those changes, in their transaction: the row
and the change it reports are committed together or not at all. Who acted and from where
come from the request this process is serving (`config.logcontext.RequestLog`, a middleware,
keeps it), unless the caller names the actor; a change with no request and no actor is the
portal's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest

from config.logcontext import current_request, serving
from config.proxies import client_address
from portal.models import AuditEvent

_reason: ContextVar[str] = ContextVar("switchyard_reason", default="")

Action = AuditEvent.Action
ACTOR_FROM_REQUEST: Any = object()  # the default: whoever the current request is


@contextlib.contextmanager
def because(reason: str) -> Iterator[None]:
    """The reason recorded with every configuration change made inside this block."""
    token = _reason.set(reason)
    try:
        yield
    finally:
        _reason.reset(token)


def current_reason() -> str:
    return _reason.get()


def current_user() -> User | None:
    """The authenticated user of the request being served (session or API token), if any."""
    request = current_request()
    user = getattr(request, "user", None) if request is not None else None
    return user if user is not None and user.is_authenticated else None


def _address() -> str | None:
    request = current_request()
    return client_address(request) if request is not None else None


def record(action: str, **fields: Any) -> AuditEvent:
    """Append one row (`entry`'s arguments). `actor=None` says the portal itself acted (a
    schedule, a sweep)."""
    row = entry(action, **fields)
    row.save(force_insert=True)
    return row


def entry(
    action: str,
    *,
    target: str,
    actor: User | None | Any = ACTOR_FROM_REQUEST,
    actor_name: str = "",
    project: str = "",
    queue: str = "",
    detail: dict | None = None,
) -> AuditEvent:
    """The row `record` appends, not yet saved (for a caller that writes it with others).
    `actor=None` says the portal itself acted; by default the request's user acted."""
    if actor is ACTOR_FROM_REQUEST:
        actor = current_user()
    return AuditEvent(
        actor_id=actor.pk if actor is not None else None,
        actor=actor.get_username() if actor is not None else actor_name,
        action=action,
        target=target[:200],
        project=project or "",
        queue=queue or "",
        detail=detail or {},
        address=_address(),
    )


def on_login_failed(sender, credentials: dict, request: HttpRequest | None = None, **kwargs):
    """Django's `user_login_failed`: the page's login and the API's token endpoint alike."""
    username = str(credentials.get("username") or "")[:150]
    with serving(request or current_request()):
        record(
            Action.LOGIN_FAILED,
            target=f"user {username}" if username else "login",
            actor=None,
            actor_name=username,
            detail={"path": getattr(request, "path", "")},
        )
