"""The two-factor pages: the login's code step, and the account's two-factor page (set up an
authenticator app, see it on, new recovery codes, turn it off). docs/security.md, "Two-factor"."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters

from portal import twofactor
from portal.errors import ApplicationError
from portal.http import SignedInRequest


@never_cache
@sensitive_post_parameters("code")
@login_required
def two_factor_code(request: SignedInRequest) -> HttpResponse:
    """The login's second step, after the password."""
    next_url = twofactor.safe_next(request, request.POST.get("next") or request.GET.get("next"))
    if twofactor.pending_step(request) != "code":
        return HttpResponseRedirect(next_url)
    error = None
    if request.method == "POST":
        try:
            twofactor.verify_code(request=request, code=request.POST.get("code"))
        except ApplicationError as exc:
            error = exc.errors[0].message
        else:
            return HttpResponseRedirect(next_url)
    context = {"next": next_url, "error": error}
    return render(
        request, "registration/two_factor_code.html", context, status=400 if error else 200
    )


_ACTIONS = {
    "enrol": twofactor.enrol_confirm,
    "recovery": twofactor.recovery_codes_renew,
}


@never_cache
@sensitive_post_parameters("code")
@login_required
def two_factor(request: SignedInRequest) -> HttpResponse:
    """The account's two-factor page; where the role requires it, the page a new login is sent
    to until an app is set up."""
    user = request.user
    next_url = twofactor.safe_next(request, request.POST.get("next") or request.GET.get("next"))
    action = request.POST.get("action") if request.method == "POST" else None
    error, codes = None, None
    try:
        if action in _ACTIONS:
            codes = _ACTIONS[action](request=request, code=request.POST.get("code"))
        elif action == "off":
            twofactor.two_factor_off(request=request, code=request.POST.get("code"))
            messages.success(request, "Two-factor is off: your password alone logs you in.")
            return redirect("two-factor")
        elif action is not None:
            raise ApplicationError(
                "expected one of enrol, recovery, off", field="action", got=str(action)[:32]
            )
    except ApplicationError as exc:
        error = exc.errors[0].message
    enrolled = twofactor.has_two_factor(user)
    device = None if enrolled else twofactor.enrolment_device(user)
    context = {
        "enrolled": enrolled,
        "required": twofactor.two_factor_required(user),
        "codes": codes,
        "error": error,
        "next": next_url,
        "secret": twofactor.secret_text(device) if device else None,
        "qr": twofactor.qr_svg(device) if device else None,
    }
    return render(request, "portal/two_factor.html", context, status=400 if error else 200)
