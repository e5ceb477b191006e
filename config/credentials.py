"""Database and broker credentials that anyone could know, refused in production settings.

A password the project has ever shipped (in a compose file, an example) is in every copy of
the repository; no password at all on another host is open to anything that reaches the port.
Either would let anyone on the network, a job included, read and change the portal's data.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

# Every password the project has shipped.
SHIPPED_PASSWORDS = frozenset({"switchyard"})
# libpq credentials other than a password: a client certificate, a password file, a service.
_OTHER_CREDENTIALS = ("sslcert", "passfile", "service")


def _is_local(host: str) -> bool:
    if not host or host == "localhost" or host.startswith("/"):
        return True  # a Unix socket, or this machine
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def credential_problems(database: Mapping[str, Any], redis_url: str | None) -> list[str]:
    """What is wrong with the database's and the broker's credentials; empty when nothing."""
    problems = []
    if not database["ENGINE"].endswith("sqlite3"):
        password, host = database.get("PASSWORD") or "", database.get("HOST") or ""
        options = database.get("OPTIONS") or {}
        if password in SHIPPED_PASSWORDS:
            problems.append(
                f"the database password is {password!r}, which the project has shipped: "
                "set a new one (DATABASE_PASSWORD_FILE, or in DATABASE_URL)"
            )
        elif not password and not _is_local(host) and not set(options) & set(_OTHER_CREDENTIALS):
            problems.append(
                f"the database on {host} is reached without a password: set one "
                "(DATABASE_PASSWORD_FILE, or in DATABASE_URL)"
            )
    if redis_url:
        parts = urlsplit(redis_url)
        password = unquote(parts.password or "")
        host = "" if parts.scheme == "unix" else parts.hostname or ""
        if password in SHIPPED_PASSWORDS:
            problems.append(
                f"the Redis password is {password!r}, which the project has shipped: "
                "set a new one (REDIS_PASSWORD_FILE, or in REDIS_URL)"
            )
        elif not password and not _is_local(host):
            problems.append(
                f"Redis on {host} is reached without a password: set one (requirepass on the "
                "server; REDIS_PASSWORD_FILE, or in REDIS_URL, here)"
            )
    return problems


def with_password(url: str | None, password: str | None) -> str | None:
    """`url` with `password` in it, when it has none of its own (a password kept apart, in a
    secret file, so that the URL itself is no secret)."""
    if not url or not password:
        return url
    parts = urlsplit(url)
    if parts.password or parts.scheme == "unix":
        return url
    user = quote(unquote(parts.username or ""), safe="")
    netloc = f"{user}:{quote(password, safe='')}@{parts.netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc))
