"""One error shape for the whole API: {"errors": [{"field", "message", "got"}]}."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig, SuspiciousOperation
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from config import outage
from portal.errors import ApplicationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        # Too many at once: the client may try again in a moment.
        headers = {"Retry-After": "1"} if exc.status == 429 else None
        return Response(exc.as_payload(), status=exc.status, headers=headers)
    if outage.is_database_outage(exc):
        # A restart of the database, not a fault of the request: try again (config/outage.py).
        set_rollback()
        return Response(
            outage.api_payload(),
            status=503,
            headers={"Retry-After": str(outage.RETRY_AFTER_SECONDS), "Cache-Control": "no-store"},
        )
    if isinstance(exc, Http404):
        # The selectors' own words ("no such task"), the same whether the thing is missing or
        # not the caller's to see.
        return Response(_errors(None, str(exc) or "not found"), status=404)
    if isinstance(exc, RequestDataTooBig):
        # A form field past DATA_UPLOAD_MAX_MEMORY_SIZE: Django's own answer is an HTML page.
        return Response(_errors(None, f"the request is too large: {exc}"), status=413)
    if isinstance(exc, SuspiciousOperation):
        return Response(_errors(None, f"the request was refused: {exc}"), status=400)
    if isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"errors": list(_flatten(exc.detail))}
    else:
        detail = getattr(exc, "detail", str(exc))
        response.data = _errors(None, str(detail))
    return response


def _errors(field: str | None, message: str, got: Any = None) -> dict[str, Any]:
    return {"errors": [{"field": field, "message": message, "got": got}]}


def _flatten(detail: Any, prefix: str | None = None):
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = None if key == "non_field_errors" else (f"{prefix}.{key}" if prefix else key)
            yield from _flatten(value, name)
    elif isinstance(detail, list):
        for item in detail:
            yield from _flatten(item, prefix)
    else:
        yield {"field": prefix, "message": str(detail), "got": None}
