"""The request as a page or API behind a sign-in sees it, for the type checker.

`login_required` and DRF's default `IsAuthenticated` let only a signed-in user through, and
`HtmxMiddleware` sets `request.htmx` on every request; Django's and DRF's types know neither,
so views behind them annotate their request with these. Nothing builds them at run time.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest
from django_htmx.middleware import HtmxDetails
from rest_framework.request import Request


class SignedInRequest(HttpRequest):
    user: User
    htmx: HtmxDetails


class SignedInApiRequest(Request):
    user: User
