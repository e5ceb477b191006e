"""Accounts: API tokens that expire, rotate and die with a password change; login throttling.

API tokens are django-rest-knox's: stored hashed (a copy of the database holds no usable
token), each with an expiry (`SWITCHYARD_TOKEN_TTL_HOURS`), several per user (a laptop's CLI
and a CI pipeline), each revocable alone. Failed logins, on the page and on the token
endpoint alike, are counted by django-axes per (username, address): past the limit that pair
is locked out for the cool-off time, answered 429. docs/security.md has the details.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import authenticate
from django.contrib.auth.signals import user_logged_in
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from drf_spectacular.utils import extend_schema, inline_serializer
from knox.models import AuthToken
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle
from rest_framework.views import APIView

from portal.errors import ApplicationError


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
    throttle_classes = [ScopedRateThrottle]
    throttle_scope = "auth"

    @extend_schema(
        request=inline_serializer(
            "Credentials",
            {"username": serializers.CharField(), "password": serializers.CharField()},
        ),
        responses={200: _TOKEN_ANSWER},
        description="A new API token (send it as `Authorization: Token <token>`). It expires "
        "after the site's token lifetime; after too many failed attempts for a username from "
        "one address the answer is 429 until the cool-off has passed.",
    )
    def post(self, request: Request) -> Response:
        data = request.data
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


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: dict | None
) -> HttpResponse:
    """What a locked-out login or token request is answered (django-axes calls this)."""
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    message = (
        "too many failed logins for this username from your address; "
        f"try again in {minutes} minutes"
    )
    if request.path.startswith("/api/"):
        body = {"errors": [{"field": None, "message": message, "got": None}]}
        response = JsonResponse(body, status=429)
    else:
        response = render(
            request, "registration/login.html", {"lockout": message, "next": ""}, status=429
        )
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response
