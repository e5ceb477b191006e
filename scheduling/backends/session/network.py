"""The portal's side of a live sandbox's egress: whether an allow-list may be given to a
session at all (docs/sandbox-network.md).

The session's tinyproxy lets through exactly the listed "host:port" pairs and resolves a
listed name when a request comes; it cannot tell where a name leads. So before a session
starts, `egress_refusal()` reads the list as the trusted side will (egress.parse_allow) and
refuses one whose names lead, now, to the portal's own services: its database, broker and
cache, and its web port, at their hosts' addresses or at any address of this machine (a
service bound to 0.0.0.0 answers on all of them). The operator who lists a name vouches for
it beyond that.
"""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

from django.conf import settings

from scheduling.backends import jobnet
from scheduling.backends.session import egress

DEFAULT_PORTS = {"postgres": 5432, "postgresql": 5432, "redis": 6379, "rediss": 6379}


def control_plane() -> list[tuple[str, int]]:
    """(host, port) of each of the portal's services a sandbox must never reach."""
    found: list[tuple[str, int]] = []
    for database in settings.DATABASES.values():
        host = database.get("HOST") or ""
        if host and not host.startswith("/"):  # a path is a Unix socket
            found.append((host, int(database.get("PORT") or 5432)))
    urls = [settings.REDIS_URL or "", getattr(settings, "CELERY_BROKER_URL", "") or ""]
    urls.append(settings.SWITCHYARD_PUBLIC_URL or "")
    for url in (part.strip() for value in urls for part in value.split(";")):
        try:
            parts = urlsplit(url)
            port = parts.port or DEFAULT_PORTS.get(parts.scheme) or _web_port(parts.scheme)
        except ValueError:
            continue
        if parts.hostname and port:
            found.append((parts.hostname, port))
    return list(dict.fromkeys(found))


def _web_port(scheme: str) -> int | None:
    return {"http": 80, "https": 443}.get(scheme)


def egress_refusal(entries: list[str] | tuple[str, ...]) -> str | None:
    """Why this allow-list may not be given to a session (the entry, what was expected, what
    it leads to), or None."""
    try:
        pairs = egress.parse_allow(list(entries))
    except egress.EgressError as exc:
        return str(exc)
    local = set(jobnet.host_addresses())
    services: dict[int, set[str]] = {}
    for host, port in control_plane():
        services.setdefault(port, set()).update(_addresses(host))
    for host, port in pairs:
        if port not in services:
            continue
        for address in _addresses(host):
            if address in services[port] or address in local or _loopback(address):
                return (
                    f"egress: {host}:{port} leads to {address}:{port}, where the portal's own "
                    "services answer: no sandbox may reach them"
                )
    return None


def _loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def _addresses(host: str) -> set[str]:
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return set()  # it does not resolve now; tinyproxy will not reach it either
    return {str(info[4][0]).split("%")[0] for info in infos}
