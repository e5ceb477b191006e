"""Address allow-lists: pages that answer only clients from given networks (docs/security.md,
"Address allow-lists").

The client's address is the one `config.proxies.client_address` decides: the socket peer,
or behind a trusted proxy the address it forwarded; a forwarded address from anyone else
is never read. `AdminAllowList` guards the admin console and the console pages of admins
(`SWITCHYARD_ADMIN_ALLOW`, `SWITCHYARD_ADMIN_PATHS`); `address_allowed` and `allowed_from`
guard any other view with a list of its own (the metrics endpoint's).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.html import escape

from config.proxies import Network, client_address, parse_address

log = logging.getLogger(__name__)


def address_allowed(request: HttpRequest, networks: Sequence[Network]) -> bool:
    """Whether this request's client is in `networks` (a setting read with
    `config.env.env_networks`). An empty list allows everyone."""
    if not networks:
        return True
    address = parse_address(client_address(request) or "")
    return address is not None and any(address in network for network in networks)


def refused(request: HttpRequest) -> HttpResponse:
    """The 403 a client outside a page's allow-list gets: its address, nothing more."""
    address = client_address(request) or "unknown"
    log.warning("refused %s to %s: not in its address allow-list", request.path, address)
    body = (
        "<!doctype html><title>Not allowed</title>"
        f"<h1>403: not allowed from this address</h1><p>Your address ({escape(address)}) "
        "is not allowed to reach this page. Ask the portal's administrators if you need it.</p>"
    )
    return HttpResponse(body, status=403, content_type="text/html; charset=utf-8")


def allowed_from(setting: str) -> Callable:
    """View decorator: answer only clients in the networks of `setting` (read per request,
    so `override_settings` and tests see the current value); others get `refused`."""

    def decorate(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @functools.wraps(view)
        def guarded(request: HttpRequest, *args, **kwargs) -> HttpResponse:
            if not address_allowed(request, getattr(settings, setting)):
                return refused(request)
            return view(request, *args, **kwargs)

        return guarded

    return decorate


class AdminAllowList:
    """Middleware: a path under one of `SWITCHYARD_ADMIN_PATHS` answers only clients in
    `SWITCHYARD_ADMIN_ALLOW` (everyone while it is empty)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        networks = settings.SWITCHYARD_ADMIN_ALLOW
        if (
            networks
            and request.path_info.startswith(tuple(settings.SWITCHYARD_ADMIN_PATHS))
            and not address_allowed(request, networks)
        ):
            return refused(request)
        return self.get_response(request)
