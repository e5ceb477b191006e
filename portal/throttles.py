"""The API's per-user request counts (`REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]`), asked by a
page whose work an API call shares: the submit page's preview and `POST
/api/v1/tasks/preview/` draw on one count per user, so neither door is a way around the
other's limit."""

from __future__ import annotations

from django.http import HttpRequest
from rest_framework.throttling import ScopedRateThrottle


def throttled(request: HttpRequest, scope: str) -> float | None:
    """None while `request`'s user may go on in `scope` (this request counted), else the
    seconds to wait: the count an API view with `throttle_scope = scope` keeps."""
    throttle = ScopedRateThrottle()
    if throttle.allow_request(request, _Scoped(scope)):  # type: ignore[arg-type]
        return None
    return throttle.wait() or 1.0


class _Scoped:
    """What `ScopedRateThrottle` reads of its view: the scope."""

    def __init__(self, scope: str) -> None:
        self.throttle_scope = scope
