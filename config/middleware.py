"""Refuse what no page or API could mean before any view or database sees it: query strings
with control characters, and bodies over their path's limit (docs/security.md)."""

from __future__ import annotations

import io
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.urls import reverse
from django.utils.module_loading import import_string
from rest_framework.exceptions import APIException

# NUL and other control characters: PostgreSQL refuses NUL in any text (a 500 if it got
# there), and no filter, page number or offset ever contains them.
_CONTROL = frozenset(chr(c) for c in range(32)) | {"\x7f"}


class QueryStringGuard:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        for name, values in request.GET.lists():
            for text in (name, *values):
                if _CONTROL.intersection(text):
                    return _refuse(request, name, "must not contain control characters")
        return self.get_response(request)


def _refuse(request: HttpRequest, name: str, message: str) -> HttpResponse:
    if request.path.startswith("/api/"):
        body = {"errors": [{"field": name, "message": message, "got": None}]}
        return JsonResponse(body, status=400)
    return HttpResponseBadRequest(f"query parameter {name!r} {message}", content_type="text/plain")


# --- Request bodies --------------------------------------------------------------------------
# Room for the multipart framing around an uploaded file or field (the descriptor API allows
# the same: scheduling/api/tasks.py).
MULTIPART_SLACK = 64 * 1024
_READ_SIZE = 64 * 1024

# Where a signed-in user may send more than SWITCHYARD_BODY_MAX_BYTES: the URL's name, the
# setting that bounds what its view accepts, how many times that, and room for multipart
# framing. A page's upload takes twice its limit, so that a file somewhat over it still gets
# the page's own answer, which names the file and its size. The front
# (docker/nginx/switchyard.conf) has the same paths with the same limits.
LARGER_BODIES: dict[str, tuple[str, int, int]] = {
    "api-task-batch": ("SWITCHYARD_BATCH_MAX_BYTES", 1, 0),
    "api-task-list": ("SWITCHYARD_DESCRIPTOR_MAX_BYTES", 1, MULTIPART_SLACK),
    "api-workflow-list": ("SWITCHYARD_DESCRIPTOR_MAX_BYTES", 1, MULTIPART_SLACK),
    "task-submit": ("SWITCHYARD_DESCRIPTOR_MAX_BYTES", 2, MULTIPART_SLACK),
    "simulation-list": ("SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES", 2, MULTIPART_SLACK),
    # A collector's samples: up to 10,000 a request (accounting/services.py), a few hundred
    # bytes each.
    "api-usage-samples": ("SWITCHYARD_BODY_MAX_BYTES", 4, 0),
}

# Paths below these take a file of up to the setting's size: a Files upload, streamed by its
# view into the folder (the API's PUT, the page's form with its multipart framing). Sent
# without a length, such a body is refused (411) rather than held in memory here.
STREAMED_BODIES: dict[str, tuple[str, int]] = {
    "api-files": ("SWITCHYARD_FILES_UPLOAD_MAX_BYTES", 0),
    "files": ("SWITCHYARD_FILES_UPLOAD_MAX_BYTES", MULTIPART_SLACK),
}

# Who a request without a session may be: an API token or a collector's token. Session
# authentication is not among them: DRF's checks the CSRF token, which reads the body.
_TOKEN_AUTHENTICATION = (
    "portal.hot.CachedTokenAuthentication",
    "accounting.api.CollectorAuthentication",
)


def body_limit(path: str, *, authenticated: bool) -> int:
    """The largest body `path` takes: the small anonymous limit for every path without a
    signed-in user, else the site-wide limit or the path's own larger one."""
    if not authenticated:
        return settings.SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS
    limit = settings.SWITCHYARD_BODY_MAX_BYTES
    for name, (setting, times, slack) in LARGER_BODIES.items():
        if path == reverse(name):
            limit = max(limit, getattr(settings, setting) * times + slack)
    if _streamed(path):
        setting, slack = STREAMED_BODIES[_streamed(path)]
        limit = max(limit, getattr(settings, setting) + slack)
    return limit


def _streamed(path: str) -> str:
    """The name of the Files root `path` is below, or ""."""
    for name in STREAMED_BODIES:
        if path.startswith(reverse(name)) and path != reverse(name):
            return name
    return ""


class BodyLimit:
    """Refuse a body over its path's limit before anything reads it (Django's form parsing
    writes an uploaded file to a temporary file as it reads, and the CSRF check parses a POST).

    A declared length within the anonymous limit passes at once. Above it, a request with no
    session cookie and no Authorization header is refused without loading a session or a
    user; otherwise who sent it decides which limit holds. A chunked body (no length) is read
    up to its limit and refused one byte past it; one within the limit is handed on with its
    length, as any other body (Django alone would read nothing of it).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        declared = _declared_length(meta.get("CONTENT_LENGTH"))
        chunked = declared is None and "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked or (declared or 0) > settings.SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS:
            authenticated = _authenticated(request)
            limit = body_limit(request.path, authenticated=authenticated)
            if chunked and authenticated and _streamed(request.path):
                return _length_required(request)
            if chunked:
                body = _read_at_most(meta["wsgi.input"], limit)
                if body is None:
                    return _too_large(request, None, limit, authenticated)
                meta["CONTENT_LENGTH"] = str(len(body))
                request._stream = io.BytesIO(body)
            elif declared is not None and declared > limit:
                return _too_large(request, declared, limit, authenticated)
        return self.get_response(request)


def _declared_length(raw: str | None) -> int | None:
    try:
        return max(0, int(raw)) if raw else None
    except ValueError:
        return None  # the server refuses a malformed length; Django reads none of it


def _has_credentials(request: HttpRequest) -> bool:
    return settings.SESSION_COOKIE_NAME in request.COOKIES or "HTTP_AUTHORIZATION" in request.META


def _authenticated(request: HttpRequest) -> bool:
    if getattr(request, "_force_auth_user", None) is not None:
        return True  # DRF's forced authentication (its test client's): DRF counts it too
    if not _has_credentials(request):
        return False  # anonymous, known without loading a session or a user
    if request.user.is_authenticated:
        return True
    for path in _TOKEN_AUTHENTICATION:
        try:
            if import_string(path)().authenticate(request):
                return True
        except APIException:
            continue  # a refused token is anonymous here; the view says why
    return False


def _read_at_most(stream, limit: int) -> bytes | None:
    """The body, or None once it runs past `limit` (the rest is never read)."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        part = stream.read(min(_READ_SIZE, limit + 1 - size))
        if not part:
            return b"".join(parts)
        parts.append(part)
        size += len(part)
    return None


def _length_required(request: HttpRequest) -> HttpResponse:
    message = "an upload must say its length (Content-Length); it is not sent in chunks"
    body = {"errors": [{"field": None, "message": message, "got": None}]}
    return JsonResponse(body, status=411)


def _too_large(
    request: HttpRequest, got: int | None, limit: int, authenticated: bool
) -> HttpResponse:
    size = f"is {got} bytes" if got is not None else "runs past the limit (sent without a length)"
    where = f"for {request.path}" if authenticated else "without signing in"
    message = f"the request body {size}; the limit {where} is {limit} bytes"
    body = {"errors": [{"field": None, "message": message, "got": got}]}
    return JsonResponse(body, status=413)
