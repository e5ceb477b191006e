"""Two-factor login: after the password, a code from an authenticator app (TOTP), or one of
the recovery codes shown once at enrolment (docs/security.md, "Two-factor").

django-otp keeps the devices (an authenticator app's secret, a set of recovery codes) and marks
a session verified; this module says who must have one (SWITCHYARD_2FA_REQUIRED_ROLES), enrols,
checks codes, and `TwoFactorGate` holds a session that has not given its code at that step.
A request authenticated with an API token is not a session: the gate never sees it.
"""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlencode

import segno
from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.urls import Resolver404, ResolverMatch, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django_otp import login as otp_login
from django_otp import user_has_device
from django_otp.plugins.otp_static.models import StaticDevice, StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice
from knox.models import AuthToken

from portal import audit, roles
from portal.errors import ApplicationError

# The session remembers that this login needs no further step: it gave its code, or it was
# not asked (no app set up, no role that requires one), which holds only while that is so.
_PASSED = "switchyard_2fa_verified"  # not the old key, which also marked "not asked"
_NOT_ASKED = "switchyard_2fa_not_asked"
_APP = "authenticator app"
_RECOVERY = "recovery codes"


def two_factor_required(user: User) -> bool:
    """Whether the user holds a role SWITCHYARD_2FA_REQUIRED_ROLES names (`queue-admin` for
    the role "queue admin"), each asked alone: a session that was not asked for a code asks
    this at every request."""
    required = settings.SWITCHYARD_2FA_REQUIRED_ROLES
    return any(roles.ROLES[role.replace("-", " ")](user) for role in required)


def has_two_factor(user: User) -> bool:
    return user_has_device(user, confirmed=True)


def pending_step(request: HttpRequest) -> str | None:
    """What a signed-in session must do before anything else: "code" (give a code), "enrol"
    (set up an authenticator app: their role requires one), or None. A session that was not
    asked (no app, no such role) is asked as soon as its account is given a role that
    requires two-factor, not at its next login."""
    user = request.user
    if not user.is_authenticated or request.session.get(_PASSED) == user.pk:
        return None
    not_asked = request.session.get(_NOT_ASKED) == user.pk
    required = two_factor_required(user)
    if not_asked and not required:
        return None
    # is_verified: added by django-otp's middleware.
    if user.is_verified():  # type: ignore[attr-defined]
        request.session[_PASSED] = user.pk
        return None
    if has_two_factor(user) and (required or not not_asked):
        return "code"
    if required:
        return "enrol"
    request.session[_NOT_ASKED] = user.pk
    return None


def token_refusal(user: User) -> str | None:
    """Why an API token of `user` may not be used now: their role requires two-factor and
    they have none set up (a token issued before they were given that role), else None."""
    if two_factor_required(user) and not has_two_factor(user):
        return "your role requires two-factor: set it up on the portal's two-factor page first"
    return None


# --- Enrolment ------------------------------------------------------------------------------


def enrolment_device(user: User) -> TOTPDevice:
    """The authenticator-app secret being set up: made once, kept until confirmed, so a reload
    of the page shows the same QR code."""
    device = TOTPDevice.objects.filter(user=user, confirmed=False, name=_APP).first()
    return device or TOTPDevice.objects.create(user=user, confirmed=False, name=_APP)


def secret_text(device: TOTPDevice) -> str:
    """The secret as an authenticator app takes it typed in (base32, no padding)."""
    return base64.b32encode(device.bin_key).decode("ascii").rstrip("=")


def qr_svg(device: TOTPDevice) -> str:
    """The otpauth:// address as an inline SVG QR code (no image request, no script)."""
    return segno.make(device.config_url, error="m").svg_inline(scale=5, border=2)


def _recovery_codes_new(user: User) -> list[str]:
    StaticDevice.objects.filter(user=user).delete()
    device = StaticDevice.objects.create(user=user, name=_RECOVERY, confirmed=True)
    codes = [StaticToken.random_token() for _ in range(settings.SWITCHYARD_2FA_RECOVERY_CODES)]
    StaticToken.objects.bulk_create(StaticToken(device=device, token=code) for code in codes)
    return codes


def _clean_code(code: object) -> str:
    if not isinstance(code, str) or not code.strip():
        raise ApplicationError(
            "required: the code your app shows, or a recovery code", field="code"
        )
    text = "".join(code.split()).lower()
    if len(text) > 16:
        raise ApplicationError("expected at most 16 characters", field="code", got=text[:32])
    return text


@transaction.atomic
def enrol_confirm(*, request: HttpRequest, code: object) -> list[str]:
    """The first code from the app confirms its secret; the session counts as verified, the
    account's API tokens are revoked, and the recovery codes are returned, to be shown once
    (they are stored only as a device's tokens)."""
    user = request.user
    text = _clean_code(code)
    device = TOTPDevice.objects.select_for_update().filter(user=user, confirmed=False).first()
    if device is None or has_two_factor(user):  # type: ignore[arg-type]
        raise ApplicationError("nothing to confirm: open the two-factor page again", field="code")
    if not device.verify_token(text):
        raise ApplicationError("that code did not match; try the app's current one", field="code")
    device.confirmed = True
    device.save(update_fields=["confirmed"])
    otp_login(request, device)
    # The account's API tokens were issued with its password alone: they end here, and new
    # ones ask for a code.
    AuthToken.objects.filter(user=user).delete()
    return _recovery_codes_new(user)  # type: ignore[arg-type]


def _matching_device(user: User, text: str) -> Any:
    """The device of `user`'s that accepts the code `text` (the app's, then a recovery code),
    or None. Each device counts its own failures and makes the next try wait (django-otp's
    throttling)."""
    for model in (TOTPDevice, StaticDevice):
        for device in model.objects.filter(user=user, confirmed=True):
            allowed, _ = device.verify_is_allowed()
            if allowed and device.verify_token(text):
                return device
    return None


def _check_code(*, request: HttpRequest, code: object, user: User | None = None) -> Any:
    """The device that accepts `code`, or an ApplicationError; a wrong code is in the audit
    log as a failed login."""
    text = _clean_code(code)
    user = user or request.user  # type: ignore[assignment]
    device = _matching_device(user, text)  # type: ignore[arg-type]
    if device is not None:
        return device
    audit.record(
        audit.Action.LOGIN_FAILED,
        target=f"user {user.get_username()}",  # type: ignore[union-attr]
        actor=None,
        actor_name=user.get_username(),  # type: ignore[union-attr]
        detail={"path": request.path, "step": "two-factor code"},
    )
    raise ApplicationError("that code did not match; try the app's current one", field="code")


def check_token_request(*, request: HttpRequest, user: User, code: object) -> None:
    """The token endpoint's second step, after the password: a user with two-factor sends the
    app's code (or a recovery code) as `otp`; one whose role requires two-factor and who has
    not set it up gets no token until they have, on the page. Requests made with a token are
    never asked for a code."""
    if has_two_factor(user):
        try:
            _check_code(request=request, code=code, user=user)
        except ApplicationError as exc:
            raise ApplicationError(exc.errors[0].message, field="otp", got=None) from None
    elif two_factor_required(user):
        raise ApplicationError(
            "your role requires two-factor: set it up on the portal's two-factor page first",
            field="otp",
            status=403,
        )


def verify_code(*, request: HttpRequest, code: object) -> None:
    """The login's second step: a right code marks the session verified."""
    otp_login(request, _check_code(request=request, code=code))


@transaction.atomic
def recovery_codes_renew(*, request: HttpRequest, code: object) -> list[str]:
    """New recovery codes (the old ones stop working), asked with a current code."""
    _check_code(request=request, code=code)
    return _recovery_codes_new(request.user)  # type: ignore[arg-type]


@transaction.atomic
def two_factor_off(*, request: HttpRequest, code: object) -> None:
    """Remove the app and the recovery codes, asked with a current code; refused to a user
    whose role requires two-factor."""
    user = request.user
    if two_factor_required(user):  # type: ignore[arg-type]
        raise ApplicationError("your role requires two-factor: it cannot be turned off", status=403)
    _check_code(request=request, code=code)
    TOTPDevice.objects.filter(user=user).delete()
    StaticDevice.objects.filter(user=user).delete()


# --- The gate -------------------------------------------------------------------------------

# What a session with a step pending may still open, besides the step's own page.
_ALWAYS_OPEN = {"login", "logout"}
_STEP_PAGE = {"code": "two-factor-code", "enrol": "two-factor"}


def safe_next(request: HttpRequest, candidate: str | None) -> str:
    """Where to go after the step: a path on this site, else the task list."""
    if (
        candidate
        and candidate.startswith("/")
        and url_has_allowed_host_and_scheme(
            candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return candidate
    return reverse(settings.LOGIN_REDIRECT_URL)


class TwoFactorGate:
    """Until a signed-in session has given its code (or, where its role requires two-factor,
    set up an app), every page sends it to that step and the API answers 403."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        step = pending_step(request)
        if step is None:
            return self.get_response(request)
        match = getattr(request, "resolver_match", None) or _resolve(request.path_info)
        if match is not None and match.url_name in (*_ALWAYS_OPEN, _STEP_PAGE[step]):
            return self.get_response(request)
        if request.path.startswith("/api/"):
            message = (
                "this session has not given its two-factor code: finish logging in on the page"
                if step == "code"
                else "your role requires two-factor: set it up on the two-factor page first"
            )
            body = {"errors": [{"field": None, "message": message, "got": None}]}
            return JsonResponse(body, status=403)
        target = reverse(_STEP_PAGE[step])
        if request.method == "GET":
            target += "?" + _query_next(request.get_full_path())
        return HttpResponseRedirect(target)


def _resolve(path: str) -> ResolverMatch | None:
    try:
        return resolve(path)
    except Resolver404:
        return None


def _query_next(path: str) -> str:
    return urlencode({"next": path})
