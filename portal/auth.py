"""Accounts: API tokens that expire, rotate and die with a password change; login throttling.

API tokens are django-rest-knox's: stored hashed (a copy of the database holds no usable
token), each with an expiry (`SWITCHYARD_TOKEN_TTL_HOURS`), several per user (a laptop's CLI
and a CI pipeline), each revocable alone. Failed logins, on the page and on the token
endpoint alike, are counted by django-axes per (username, client address): past the limit
that pair is locked out for the cool-off time, answered 429. A username is never locked out
by itself — anyone may type it — but past a ceiling of failures from any addresses its
attempts are paced: one at a time, a few seconds apart, except from an address the user
recently logged in from. The address is config.proxies.client_address. docs/security.md has
the details.
"""

from __future__ import annotations

import hashlib
import math
import time
from datetime import timedelta
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.models import AccessLog
from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.signals import user_logged_in
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from knox.models import AuthToken
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from config.proxies import client_address
from portal.errors import ApplicationError
from portal.twofactor import check_token_request


class RevokeTokensOnPasswordChange:
    """Not a rule for passwords: Django tells every validator when a password has changed,
    and a changed password must end every API token issued under the old one."""

    def validate(self, password: str, user: Any = None) -> None:
        return None

    def password_changed(self, password: str, user: Any = None) -> None:
        if user is not None and user.pk is not None:
            AuthToken.objects.filter(user=user).delete()

    def get_help_text(self) -> str:
        return ""


class ClientAddressThrottle(ScopedRateThrottle):
    """DRF's scoped rate, counted per client address. DRF's own `get_ident` takes
    `X-Forwarded-For` whole from anyone: a client naming a new address each time was never
    throttled."""

    def get_ident(self, request: Request) -> str:
        return client_address(request) or ""


def issue_token(user) -> tuple[str, AuthToken]:
    """A new API token for `user`: the text (shown once) and its row (hashed)."""
    instance, token = AuthToken.objects.create(user)
    return token, instance


def _token_answer(token: str, instance: AuthToken) -> dict[str, Any]:
    return {"token": token, "expiry": instance.expiry}


_TOKEN_ANSWER = inline_serializer(
    "ApiToken",
    {"token": serializers.CharField(), "expiry": serializers.DateTimeField(allow_null=True)},
)


class TokenObtain(APIView):
    """`POST {"username", "password"}` → a new token. Failed attempts are counted."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [ClientAddressThrottle]
    throttle_scope = "auth"

    @extend_schema(
        request=inline_serializer(
            "Credentials",
            {
                "username": serializers.CharField(),
                "password": serializers.CharField(),
                "otp": serializers.CharField(
                    required=False,
                    help_text="For an account with two-factor: the authenticator app's code "
                    "(or a recovery code).",
                ),
            },
        ),
        responses={200: _TOKEN_ANSWER},
        description="A new API token (send it as `Authorization: Token <token>`). It expires "
        "after the site's token lifetime; after too many failed attempts for a username from "
        "one address the answer is 429 until the cool-off has passed, and after many for a "
        "username from any addresses, 429 for the few seconds of `Retry-After` (paced).",
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        username, password = data.get("username"), data.get("password")
        errors = [
            ApplicationError("required", field=name).errors[0]
            for name, value in (("username", username), ("password", password))
            if not isinstance(value, str) or not value
        ]
        if errors:
            raise ApplicationError("username and password are required", errors=errors)
        # The HttpRequest, not DRF's wrapper: the lockout middleware reads what the
        # authentication backend notes on it.
        user = authenticate(request._request, username=username, password=password)
        if user is None:
            raise ApplicationError("wrong username or password", status=400)
        check_token_request(request=request._request, user=user, code=data.get("otp"))
        # A login, as far as the failure count (reset on success) and last_login go.
        user_logged_in.send(sender=user.__class__, request=request._request, user=user)
        token, instance = issue_token(user)
        return Response(_token_answer(token, instance))


class TokenCurrent(APIView):
    """The token this request authenticated with: rotate it, or revoke it."""

    permission_classes = [IsAuthenticated]

    def _token(self, request: Request) -> AuthToken:
        if not isinstance(request.auth, AuthToken):
            raise ApplicationError(
                "authenticate with the token itself (Authorization: Token ...)", status=400
            )
        return request.auth

    @extend_schema(request=None, responses={200: _TOKEN_ANSWER})
    def post(self, request: Request) -> Response:
        """Rotate: a new token with a fresh lifetime; the one used here stops working."""
        old = self._token(request)
        token, instance = issue_token(request.user)
        old.delete()
        return Response(_token_answer(token, instance))

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        """Revoke the token used for this request."""
        self._token(request).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- Failed logins: a lockout per (username, address), a pace per username ------------------

# Set on the request by UsernamePace: seconds to wait (refused before its password was tried),
# or that its password was tried (a failure then counts towards the username's ceiling).
_PACED = "switchyard_login_paced"
_TRIED = "switchyard_password_tried"


def pace_delay(failures: int, ceiling: int, cap: int) -> int:
    """Seconds between two attempts for a username that failed `failures` times lately from
    any addresses: none below the ceiling, then 1 s, doubling with each further failure, at
    most `cap`. Never the cool-off: a username alone is something anyone can type."""
    if failures < ceiling:
        return 0
    return min(cap, 2 ** min(failures - ceiling, 20))


def _pace_keys(username: str) -> tuple[str, str]:
    digest = hashlib.sha256(username.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"login-failures:{digest}", f"login-turn:{digest}"


def record_username_failure(username: str) -> None:
    """One more failed password for `username`; the count lives until the cool-off time
    passes without a failure."""
    key, _ = _pace_keys(username)
    window = int(settings.AXES_COOLOFF_TIME.total_seconds())
    cache.add(key, 0, timeout=window)
    try:
        cache.incr(key)
    except ValueError:  # gone between the two calls
        cache.set(key, 1, timeout=window)
    cache.touch(key, window)


def username_failures(username: str) -> int:
    return cache.get(_pace_keys(username)[0], 0)


def _known_address(username: str, address: str | None) -> bool:
    """Whether the user logged in from this address lately (django-axes logs each login)."""
    if not address:
        return False
    since = timezone.now() - timedelta(days=settings.SWITCHYARD_LOGIN_KNOWN_ADDRESS_DAYS)
    return AccessLog.objects.filter(
        username=username, ip_address=address, attempt_time__gte=since
    ).exists()


def take_turn(username: str, address: str | None) -> int:
    """0 when an attempt for `username` from `address` may try its password now; otherwise
    the seconds until the next turn. Past the ceiling one attempt (from any address but a
    known one) takes the turn and the others wait, so an attacker spread over many
    addresses tries no faster than one password per pace."""
    failures = username_failures(username)
    delay = pace_delay(
        failures,
        settings.SWITCHYARD_LOGIN_USERNAME_CEILING,
        settings.SWITCHYARD_LOGIN_PACE_MAX_SECONDS,
    )
    if not delay or _known_address(username, address):
        return 0
    _, turn = _pace_keys(username)
    if cache.add(turn, time.time() + delay, timeout=delay):
        return 0
    ends = cache.get(turn)
    return max(1, math.ceil(ends - time.time())) if ends is not None else 1


class UsernamePace:
    """An authentication backend between django-axes' lockout check and the password check:
    past the per-username ceiling, an attempt that is not this username's turn is refused
    before its password is tried."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, **kwargs: Any
    ) -> None:
        if request is None or not isinstance(username, str):
            return None
        wait = take_turn(username, client_address(request))
        if wait:
            setattr(request, _PACED, wait)
            raise PermissionDenied("login attempts for this username are paced")
        setattr(request, _TRIED, True)
        return None


class LoginAttempts(AxesDatabaseHandler):
    """django-axes' database handler, and the per-username count beside it. A paced attempt
    is no failure: its password was never tried, and counting it would let anyone lock the
    (username, address) pair of the user they pace."""

    def user_login_failed(self, sender, credentials: dict, request=None, **kwargs) -> None:
        if request is not None and getattr(request, _PACED, None):
            request.axes_locked_out = True  # answered by lockout_response, below
            return
        super().user_login_failed(sender, credentials, request=request, **kwargs)
        username = (credentials or {}).get("username")
        if request is not None and getattr(request, _TRIED, False) and isinstance(username, str):
            record_username_failure(username)


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    """What a locked-out or paced login or token request is answered (django-axes calls
    this)."""
    paced = getattr(request, _PACED, None)
    if paced:
        message = (
            "too many failed logins for this username; "
            f"try again in {paced} second{'s' if paced != 1 else ''}"
        )
        return _refusal(request, message, retry_after=paced)
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    message = (
        "too many failed logins for this username from your address; "
        f"try again in {minutes} minutes"
    )
    return _refusal(request, message, retry_after=int(settings.AXES_COOLOFF_TIME.total_seconds()))


def _refusal(request: HttpRequest, message: str, *, retry_after: int) -> HttpResponse:
    if request.path.startswith("/api/"):
        body = {"errors": [{"field": None, "message": message, "got": None}]}
        response: HttpResponse = JsonResponse(body, status=429)
    else:
        response = render(
            request, "registration/login.html", {"lockout": message, "next": ""}, status=429
        )
    response["Retry-After"] = str(retry_after)
    return response
