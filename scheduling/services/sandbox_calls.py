"""How many sandbox calls (exec, files) one user may have in flight in one web process
(docs/sandboxes.md, "Throttling").

A call holds its web thread until the sandbox answers: an exec for as long as its command
runs (up to its timeout), and a sandbox whose agent drips its answer holds it to the call's
deadline. A web process has a few threads (gunicorn's gthread workers, config/runtime/serve.py),
so without a bound one user's slow execs would take them all and the site would stop
answering everyone else. Past `SWITCHYARD_SANDBOX_CALLS_PER_USER` calls of the same user in
flight in this process, the next one is refused at once (429, try again): a refusal costs the
thread a moment, a wait for a slot would hold it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Iterator
from typing import Any

from django.conf import settings

from portal.errors import ApplicationError

_lock = threading.Lock()
_held: dict[int, int] = {}


def take(user_id: int) -> None:
    """A slot for one call of `user_id`, or a 429 when the user holds all theirs here."""
    limit = settings.SWITCHYARD_SANDBOX_CALLS_PER_USER
    with _lock:
        held = _held.get(user_id, 0)
        if held >= limit:
            raise ApplicationError(
                f"{held} sandbox calls of yours are running in this web process, at most "
                f"{limit} at once; try again when one has answered",
                field=None,
                got=held,
                status=429,
            )
        _held[user_id] = held + 1


def give(user_id: int) -> None:
    """The slot `take` gave, back."""
    with _lock:
        held = _held.get(user_id, 0) - 1
        if held > 0:
            _held[user_id] = held
        else:
            _held.pop(user_id, None)


def held(user_id: int) -> int:
    with _lock:
        return _held.get(user_id, 0)


@contextlib.contextmanager
def slot(user_id: int) -> Iterator[None]:
    """One of the user's calls in flight for the block's length, or a 429."""
    take(user_id)
    try:
        yield
    finally:
        give(user_id)


class Stream:
    """A streamed call's events: closed before its first (the client gone before the answer
    began), `on_close` gives its slot back at once; once begun, the call gives it back when
    it ends."""

    def __init__(self, events: Generator[dict[str, Any]], *, on_close: Callable[[], None]):
        self._events = events
        self._started = False
        self._on_close = on_close

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> dict[str, Any]:
        self._started = True
        return next(self._events)

    def close(self) -> None:
        self._events.close()
        if not self._started:
            self._on_close()
