"""Refuse query strings no page or API could mean, before any view or database sees them."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

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
