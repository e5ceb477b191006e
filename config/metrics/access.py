"""Who may read `/metrics`: this host's loopback, the networks of `SWITCHYARD_METRICS_ALLOW`,
or a scraper with the bearer token `SWITCHYARD_METRICS_TOKEN` (docs/operations.md).

The address is the client's as config/proxies.py decides it (behind a trusted proxy, the
forwarded one), so a proxy on this host does not make every client local.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Sequence

from django.conf import settings
from django.http import HttpRequest

from config.proxies import Network, client_address

LOOPBACK: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.1/32"),
    ipaddress.ip_network("::1/128"),
)


def address_allowed(address: str | None, allowed: Sequence[Network]) -> bool:
    """Whether `address` is loopback or inside one of `allowed`."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in (*LOOPBACK, *allowed))


def bearer_token(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def scrape_allowed(request: HttpRequest) -> bool:
    """The scrape token, when one is set and shown, or an allowed address."""
    expected, shown = settings.SWITCHYARD_METRICS_TOKEN, bearer_token(request)
    if expected and shown is not None and hmac.compare_digest(shown.encode(), expected.encode()):
        return True
    return address_allowed(client_address(request), settings.SWITCHYARD_METRICS_ALLOW)
