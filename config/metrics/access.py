"""Who may read `/metrics`: this host's loopback, the networks of `SWITCHYARD_METRICS_ALLOW`,
or a scraper with the bearer token `SWITCHYARD_METRICS_TOKEN` (docs/operations.md).

The address check is the portal's allow-list (config/allowlist.py), so the address is the
client's as config/proxies.py decides it (behind a trusted proxy, the forwarded one): a
proxy on this host does not make every client local. Unlike the admin pages' list, this one
is never open to everyone: loopback is always in it, and an empty setting adds nobody.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest

from config.allowlist import address_allowed
from config.proxies import Network

LOOPBACK: tuple[Network, ...] = (
    ipaddress.ip_network("127.0.0.1/32"),
    ipaddress.ip_network("::1/128"),
)


def bearer_token(request: HttpRequest) -> str | None:
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def scrape_allowed(request: HttpRequest) -> bool:
    """The scrape token, when one is set and shown, or an allowed address."""
    expected, shown = settings.SWITCHYARD_METRICS_TOKEN, bearer_token(request)
    if expected and shown is not None and hmac.compare_digest(shown.encode(), expected.encode()):
        return True
    return address_allowed(request, [*LOOPBACK, *settings.SWITCHYARD_METRICS_ALLOW])
