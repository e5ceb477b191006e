"""Single sign-on with the centre's OpenID Connect provider (mozilla-django-oidc): the login
page's "Sign in with …" button, the code flow's two views, and the backend that makes or
updates the account from the provider's claims and applies their groups through the same
map as LDAP (portal/directory.py). Off unless SWITCHYARD_OIDC_CLIENT_ID is set
(docs/security.md, "Single sign-on (OIDC)").
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.directory import ActiveAccountsOnly, groups_apply

log = logging.getLogger(__name__)


def _claim_text(claims: dict, name: str) -> str:
    value = claims.get(name)
    return value.strip() if isinstance(value, str) else ""


def claim_groups(claims: dict) -> list[str]:
    """The group names the provider lists (a list of strings; anything else is no group)."""
    value = claims.get(settings.SWITCHYARD_OIDC["groups_claim"])
    return [group for group in value if isinstance(group, str)] if isinstance(value, list) else []


class SingleSignOnBackend(ActiveAccountsOnly, OIDCAuthenticationBackend):
    """The account is the one named by the username claim (`preferred_username` by default);
    made at the first sign-in, with no password of its own. An account with a local password
    is never taken over by a provider's user of the same name: its owner logs in with it."""

    def verify_token(self, token: str, **kwargs: Any) -> Any:
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self.OIDC_RP_CLIENT_ID not in audiences:
            raise SuspiciousOperation(
                f"ID token's aud: expected {self.OIDC_RP_CLIENT_ID!r}, got {audience!r}"
            )
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: dict) -> Any:
        claims = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(claims, dict) or claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo's sub: expected the ID token's")
        return claims

    def get_username(self, claims: dict) -> str:
        return _claim_text(claims, str(settings.SWITCHYARD_OIDC["username_claim"]))

    def verify_claims(self, claims: dict) -> bool:
        username = self.get_username(claims)
        if not username or len(username) > 150:
            claim = settings.SWITCHYARD_OIDC["username_claim"]
            log.warning("OIDC sign-in refused: the %s claim is missing or too long", claim)
            return False
        return True

    def filter_users_by_claims(self, claims: dict) -> Any:
        users = self.UserModel.objects.filter(username=self.get_username(claims))
        if any(user.has_usable_password() for user in users):
            raise SuspiciousOperation("a local account has this username: not taken over")
        return users

    def _names(self, user, claims: dict) -> None:
        user.email = _claim_text(claims, "email")[:254]
        user.first_name = _claim_text(claims, "given_name")[:150]
        user.last_name = _claim_text(claims, "family_name")[:150]
        user.save(update_fields=["email", "first_name", "last_name"])

    def create_user(self, claims: dict) -> Any:
        user = self.UserModel.objects.create_user(self.get_username(claims))  # no password
        return self.update_user(user, claims)

    def update_user(self, user, claims: dict) -> Any:
        if not user.is_active:  # refused (ActiveAccountsOnly): its sign-in changes nothing
            return user
        self._names(user, claims)
        groups_apply(user=user, groups=claim_groups(claims), source="oidc")
        return user


def _when_enabled(view):
    """The library's views read their settings when made: off, the paths do not exist."""

    def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.SWITCHYARD_OIDC["enabled"]:
            raise Http404("single sign-on is not configured")
        return view(request, *args, **kwargs)

    return run


sign_in = _when_enabled(OIDCAuthenticationRequestView.as_view())
callback = _when_enabled(OIDCAuthenticationCallbackView.as_view())


class LoginView(auth_views.LoginView):
    """Django's login page, with the provider's button when single sign-on is configured."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        oidc = settings.SWITCHYARD_OIDC
        context["sign_in_with"] = oidc["name"] if oidc["enabled"] else None
        return context
