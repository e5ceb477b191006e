"""Live sandboxes as plain rules (docs/sandboxes.md): what a create asks for is checked here,
and the shape of a queue's sandbox settings. Pure: no ORM, no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

OVER_CONCURRENCY = ("queue", "refuse")
# A host is a DNS name (no raw IP: the proxy allows names, docs/sandboxes.md), a port 1-65535.
_HOST = re.compile(
    r"^(?=.{1,253}$)(?!\d+(\.\d+)*$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*"
    r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
)
MAX_EGRESS = 64
MAX_WARM = 50  # warm sandboxes per template of one queue


def host_port_problem(value: Any) -> str | None:
    """Why `value` is not a "host:port" an allow-list takes; None when it is."""
    if not isinstance(value, str):
        return 'a "host:port" string'
    host, sep, port = value.rpartition(":")
    if not sep or not host:
        return 'a "host:port" string, e.g. "api.example.org:443"'
    if not _HOST.match(host):
        return "a DNS host name in lower case (no raw IP address, no wildcard)"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return "a port from 1 to 65535"
    return None


def egress_list_problem(value: Any) -> tuple[str, Any] | None:
    """(what is expected, what was got) when `value` is not a list of "host:port"."""
    if not isinstance(value, list):
        return 'a list of "host:port" strings', value
    if len(value) > MAX_EGRESS:
        return f"at most {MAX_EGRESS} entries", len(value)
    for item in value:
        if why := host_port_problem(item):
            return why, item
    return None


def warm_pool_problem(value: Any) -> tuple[str, Any] | None:
    """(expected, got) when `value` is not {template: count} ("" the system template)."""
    if not isinstance(value, dict):
        return 'an object {template: count}, e.g. {"": 2}', value
    for template, count in value.items():
        if not isinstance(template, str) or len(template) > 255:
            return "template names: strings of at most 255 characters", template
        if type(count) is not int or not 0 <= count <= MAX_WARM:
            return f"counts from 0 to {MAX_WARM}", count
    return None


def outside_allowed(asked: Iterable[str], allowed: Iterable[str]) -> list[str]:
    """What `asked` names that `allowed` does not, in the order asked."""
    ok = set(allowed)
    return [item for item in asked if item not in ok]


@dataclass(frozen=True, slots=True)
class Concurrency:
    """A create's answer from the queue's max_concurrency: start, queue, or refuse."""

    verdict: str  # "start" | "queue" | "refuse"
    reason: str = ""


def concurrency(active: int, cap: int | None, over: str, queue: str) -> Concurrency:
    """`active` dispatched or running tasks in the queue, `cap` its max_concurrency."""
    if cap is None or active < cap:
        return Concurrency("start")
    reason = f"queue {queue} runs its maximum of {cap} jobs (max_concurrency)"
    return Concurrency("refuse" if over == "refuse" else "queue", reason)
