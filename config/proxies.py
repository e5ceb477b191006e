"""Who a request comes from: the one place the portal decides a client's address.

The socket peer (`REMOTE_ADDR`) is the client, unless the peer is one of the trusted
proxies (`SWITCHYARD_TRUSTED_PROXIES`). Then `X-Forwarded-For` is read from the right —
each trusted proxy appends the address it was connected from — skipping trusted proxies;
the first address that is not one is the client. Everything left of it was written by
the client itself and is never believed. A peer that is not a trusted proxy has its
forwarding headers removed before anything reads them (Django's `SECURE_PROXY_SSL_HEADER`
included), so a header only a proxy may set is never taken from a client.

The login lockout (django-axes), the token endpoint's throttle and the audit log all take
the address from `client_address`; docs/security.md ("Trusted proxies").
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence

from django.conf import settings
from django.http import HttpRequest, HttpResponse

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# What a proxy says about the request it forwards; from anyone else they are forgeries.
FORWARDING_HEADERS = (
    "HTTP_X_FORWARDED_FOR",
    "HTTP_X_FORWARDED_PROTO",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_X_FORWARDED_PROTOCOL",
    "HTTP_X_FORWARDED_SSL",
    "HTTP_X_REAL_IP",
    "HTTP_FORWARDED",
)

_ATTRIBUTE = "_switchyard_client_address"


def parse_address(text: str) -> Address | None:
    """An address as a proxy or a socket writes it (`1.2.3.4`, `1.2.3.4:5678`, `[::1]:80`,
    `::ffff:1.2.3.4`), or None when it is not one."""
    text = text.strip()
    if text.startswith("[") and "]" in text:
        text = text[1 : text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, proxies: Sequence[Network]) -> bool:
    return any(address in network for network in proxies)


def derive_client_address(
    peer: str, forwarded_for: str | None, proxies: Sequence[Network]
) -> str | None:
    """The client's address, from the socket peer and the `X-Forwarded-For` it sent."""
    current = parse_address(peer or "")
    if current is None:
        return None
    if not _trusted(current, proxies):
        return str(current)
    for hop in reversed((forwarded_for or "").split(",")):
        if not hop.strip():
            continue
        address = parse_address(hop)
        if address is None:
            # Not a proxy's record of its peer (a misconfigured proxy passed its client's
            # text on): go no further than the last hop a trusted proxy vouched for.
            break
        current = address
        if not _trusted(current, proxies):
            break
    return str(current)


def client_address(request: HttpRequest) -> str | None:
    """The address this request's client connects from (see the module's text)."""
    known = getattr(request, _ATTRIBUTE, None)
    if known is None:
        known = derive_client_address(
            request.META.get("REMOTE_ADDR", ""),
            request.META.get("HTTP_X_FORWARDED_FOR"),
            settings.TRUSTED_PROXIES,
        )
        setattr(request, _ATTRIBUTE, known)
    return known


def peer_is_trusted_proxy(request: HttpRequest) -> bool:
    if not settings.TRUSTED_PROXIES:
        return False
    peer = parse_address(request.META.get("REMOTE_ADDR", "") or "")
    return peer is not None and _trusted(peer, settings.TRUSTED_PROXIES)


class ForwardingHeaders:
    """First of all middleware: forwarding headers from a peer that is not a trusted proxy
    are dropped, so nothing after it (the HTTPS check, a throttle, a library) can believe
    them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not peer_is_trusted_proxy(request):
            strip_forwarding_headers(request.META)
        return self.get_response(request)


def strip_forwarding_headers(meta: dict) -> None:
    for name in FORWARDING_HEADERS:
        meta.pop(name, None)
