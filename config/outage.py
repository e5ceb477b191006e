"""Answers while the database is away (a restart, a failover): 503 with `Retry-After`.

A request that meets a lost or refused database connection has done nothing the client can
rely on, and a moment later the same request will most likely succeed: it is the server that
is unavailable, not the request that failed. So the API answers 503 in its one error shape
and pages a small 503 page, both with `Retry-After`, instead of Django's HTML 500. The page is
rendered without a request context: its context processors would read the database.

Two doors lead here: the API's exception handler (portal/api_errors.py) for DRF views, and
the site's 500 handler (`handler500`, config/urls.py) for everything else, including a
middleware (sessions, authentication) that met the database first.
"""

from __future__ import annotations

import logging
import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

log = logging.getLogger(__name__)

# A PostgreSQL restart takes a few seconds; a client that waits this long mostly gets through.
RETRY_AFTER_SECONDS = 5
MESSAGE = "the database is unavailable for a moment (a restart?); try again shortly"


def is_database_outage(exc: BaseException | None) -> bool:
    """A connection that was lost, refused or closed under the request (not a bad query)."""
    return isinstance(exc, OperationalError | InterfaceError)


def api_payload() -> dict:
    return {"errors": [{"field": None, "message": MESSAGE, "got": None}]}


def outage_response(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(api_payload(), status=503)
    else:
        response = HttpResponse(render_to_string("503.html", {"message": MESSAGE}), status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    response["Cache-Control"] = "no-store"
    return response


def server_error(request: HttpRequest, *args, **kwargs) -> HttpResponse:
    """The site's 500 handler: a database outage is a 503; anything else Django's 500."""
    exc = sys.exc_info()[1]  # Django calls its 500 handler inside the `except` that caught it
    if is_database_outage(exc):
        log.warning("answered 503: the database is unavailable (%s)", exc)
        return outage_response(request)
    return defaults.server_error(request, *args, **kwargs)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The site's 404 handler: under /api/ a path that names nothing answers in the API's one
    error shape, as a DRF view's 404 does; elsewhere Django's page."""
    if request.path.startswith("/api/"):
        message = f"no such API path: {request.path}"
        body = {"errors": [{"field": None, "message": message, "got": None}]}
        return JsonResponse(body, status=404)
    return defaults.page_not_found(request, exception)
