"""Two-factor login with the Django test client: the code step after the password, enrolment
(required for the roles the site names, optional for researchers), recovery codes shown once
and each good once, the API's sessions held like the pages, tokens asked for a code."""

from __future__ import annotations

import base64
import re
import time

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.shortcuts import resolve_url
from django.test import Client
from django_otp.oath import totp
from django_otp.plugins.otp_static.models import StaticToken
from django_otp.plugins.otp_totp.models import TOTPDevice

from portal.models import AuditEvent

OPERATORS = ["platform-admin", "queue-admin", "finance"]


def code_for(secret: str, *, steps_ahead: int = 0) -> str:
    """The code an authenticator app shows for the base32 `secret`, now or a few 30 s steps
    later (a code is taken once: a second login in the same step uses the next one)."""
    key = base64.b32decode(secret + "=" * (-len(secret) % 8))
    return f"{totp(key, drift=steps_ahead):06d}"


def log_in(client: Client, username: str, password: str, next_url: str = "/"):
    return client.post("/login/", {"username": username, "password": password, "next": next_url})


def enrol(client: Client) -> tuple[str, list[str]]:
    """Sets up the app on the two-factor page; the secret and the recovery codes shown."""
    page = client.get("/account/two-factor/")
    secret = re.search(r'id="totp-secret">([A-Z2-7]+)<', page.content.decode())[1]
    done = client.post("/account/two-factor/", {"action": "enrol", "code": code_for(secret)})
    assert done.status_code == 200, done.content
    codes = re.findall(r"<li><code>([a-z2-7]+)</code></li>", done.content.decode())
    return secret, codes


@pytest.fixture
def required(settings):
    settings.SWITCHYARD_2FA_REQUIRED_ROLES = OPERATORS


def test_a_required_role_without_an_app_is_led_to_enrolment_before_anything_else(
    site, client, required
):
    answer = log_in(client, "admin", "admin-demo-pass", "/queues/")
    assert answer.status_code == 302
    page = client.get("/queues/")
    assert page.status_code == 302
    assert page["Location"] == "/account/two-factor/?next=%2Fqueues%2F"
    assert client.get("/admin/").status_code == 302
    api = client.get("/api/v1/tasks/")
    assert api.status_code == 403
    assert "requires two-factor" in api.json()["errors"][0]["message"]
    enrolment = client.get(page["Location"])
    assert b"Your role requires two-factor" in enrolment.content
    assert b"<svg" in enrolment.content  # the QR code, inline

    secret, codes = enrol(client)
    assert len(codes) == 10
    assert TOTPDevice.objects.get(user__username="admin").confirmed
    # The session counts as verified from the enrolment on.
    assert client.get("/queues/").status_code == 200
    # Shown once: the page shows no code again.
    again = client.get("/account/two-factor/")
    assert b"Two-factor is <strong>on</strong>" in again.content
    assert not any(code.encode() in again.content for code in codes)


def test_a_user_with_an_app_gives_its_code_after_the_password(site, client, required):
    secret, _ = enrol_as(client, "finn", "finn-demo-pass")
    client.post("/logout/")

    log_in(client, "finn", "finn-demo-pass", "/usage/")
    held = client.get("/usage/")
    assert held["Location"] == "/login/code/?next=%2Fusage%2F"
    # The enrolment page is closed too: a password alone must not replace the app.
    assert client.get("/account/two-factor/")["Location"].startswith("/login/code/")
    wrong = client.post("/login/code/", {"code": "000000", "next": "/usage/"})
    assert wrong.status_code == 400
    assert b"did not match" in wrong.content
    assert client.get("/usage/").status_code == 302
    assert AuditEvent.objects.filter(action="login.failed", actor="finn").exists()

    time.sleep(1.1)  # a failure makes the next try wait a second (test_wrong_codes_are_throttled)
    right = client.post(
        "/login/code/", {"code": code_for(secret, steps_ahead=1), "next": "/usage/"}
    )
    assert right.status_code == 302 and right["Location"] == "/usage/"
    assert client.get("/usage/").status_code == 200


def enrol_as(client: Client, username: str, password: str) -> tuple[str, list[str]]:
    log_in(client, username, password)
    return enrol(client)


def test_a_recovery_code_logs_in_once(site, client, required):
    _, codes = enrol_as(client, "quinn", "quinn-demo-pass")
    for attempt in range(2):
        client.post("/logout/")
        log_in(client, "quinn", "quinn-demo-pass")
        answer = client.post("/login/code/", {"code": codes[0].upper(), "next": "/"})
        if attempt == 0:
            assert answer.status_code == 302, answer.content
            assert client.get("/queues/").status_code == 200
        else:
            assert answer.status_code == 400
    assert StaticToken.objects.filter(device__user__username="quinn").count() == 9


def test_a_code_is_not_taken_twice(site, client, required):
    secret, _ = enrol_as(client, "admin", "admin-demo-pass")
    client.post("/logout/")
    log_in(client, "admin", "admin-demo-pass")
    # The enrolment used the current step's code: the same code again is refused.
    assert client.post("/login/code/", {"code": code_for(secret)}).status_code == 400


def test_a_researcher_logs_in_with_the_password_alone_and_may_enrol(site, client, required):
    log_in(client, "alice", "alice-demo-pass")
    assert client.get("/").status_code == 200
    secret, _ = enrol(client)
    client.post("/logout/")
    log_in(client, "alice", "alice-demo-pass")
    assert client.get("/")["Location"].startswith("/login/code/")
    client.post("/login/code/", {"code": code_for(secret, steps_ahead=1)})
    assert client.get("/").status_code == 200
    # Optional for her: she may turn it off, with a code.
    off = client.post(
        "/account/two-factor/", {"action": "off", "code": code_for(secret, steps_ahead=2)}
    )
    assert off.status_code == 302
    assert not TOTPDevice.objects.filter(user__username="alice").exists()


def test_a_required_role_cannot_turn_it_off(site, client, required):
    secret, _ = enrol_as(client, "admin", "admin-demo-pass")
    off = client.post(
        "/account/two-factor/", {"action": "off", "code": code_for(secret, steps_ahead=1)}
    )
    assert off.status_code == 400
    assert b"cannot be turned off" in off.content
    assert TOTPDevice.objects.filter(user__username="admin").exists()


def test_new_recovery_codes_replace_the_old(site, client, required):
    secret, old = enrol_as(client, "admin", "admin-demo-pass")
    renewed = client.post(
        "/account/two-factor/", {"action": "recovery", "code": code_for(secret, steps_ahead=1)}
    )
    new = re.findall(r"<li><code>([a-z2-7]+)</code></li>", renewed.content.decode())
    assert len(new) == 10 and not set(new) & set(old)
    tokens = set(
        StaticToken.objects.filter(device__user__username="admin").values_list("token", flat=True)
    )
    assert tokens == set(new)


def test_without_the_setting_nobody_is_asked_to_enrol(site, client, settings):
    settings.SWITCHYARD_2FA_REQUIRED_ROLES = []
    log_in(client, "admin", "admin-demo-pass")
    assert client.get("/queues/").status_code == 200


def test_the_next_address_is_kept_on_this_site(site, client, required):
    secret, _ = enrol_as(client, "admin", "admin-demo-pass")
    client.post("/logout/")
    log_in(client, "admin", "admin-demo-pass")
    answer = client.post(
        "/login/code/", {"code": code_for(secret, steps_ahead=1), "next": "https://evil.example/"}
    )
    assert answer["Location"] == resolve_url(settings.LOGIN_REDIRECT_URL)


def test_a_token_asks_the_code_of_an_account_with_two_factor(site, client, required):
    secret, _ = enrol_as(client, "admin", "admin-demo-pass")
    url = "/api/v1/auth/token/"
    body = {"username": "admin", "password": "admin-demo-pass"}
    missing = client.post(url, body, content_type="application/json")
    assert missing.status_code == 400
    assert missing.json()["errors"][0]["field"] == "otp"
    good = {**body, "otp": code_for(secret, steps_ahead=1)}
    token = client.post(url, good, content_type="application/json").json()["token"]
    # A request made with the token is never asked for a code.
    fresh = Client()
    answer = fresh.get("/api/v1/tasks/", HTTP_AUTHORIZATION=f"Token {token}")
    assert answer.status_code == 200


def test_a_required_role_gets_no_token_before_enrolling(site, client, required):
    body = {"username": "finn", "password": "finn-demo-pass"}
    answer = client.post("/api/v1/auth/token/", body, content_type="application/json")
    assert answer.status_code == 403
    assert "requires two-factor" in answer.json()["errors"][0]["message"]


def test_a_role_that_requires_it_given_later_asks_at_once(site, client, required):
    """A researcher's session and token from before they were made a platform admin: the
    session is sent to enrol at its next request, the token refused, and ended when they
    enrol."""
    log_in(client, "alice", "alice-demo-pass")
    assert client.get("/queues/").status_code == 200  # not asked: no such role
    body = {"username": "alice", "password": "alice-demo-pass"}
    token = client.post("/api/v1/auth/token/", body, content_type="application/json")
    token = token.json()["token"]
    alice = User.objects.get(username="alice")
    alice.is_superuser = alice.is_staff = True
    alice.save()
    page = client.get("/queues/")
    assert page.status_code == 302 and page["Location"].startswith("/account/two-factor/")
    refused = Client().get("/api/v1/tasks/", HTTP_AUTHORIZATION=f"Token {token}")
    assert refused.status_code == 403
    assert "requires two-factor" in refused.json()["errors"][0]["message"]
    enrol(client)
    assert client.get("/queues/").status_code == 200
    # Issued with the password alone, it ended with the enrolment: a new one asks a code.
    answer = Client().get("/api/v1/tasks/", HTTP_AUTHORIZATION=f"Token {token}")
    assert answer.status_code == 401


def test_wrong_codes_are_throttled(site, client, required):
    secret, _ = enrol_as(client, "admin", "admin-demo-pass")
    client.post("/logout/")
    log_in(client, "admin", "admin-demo-pass")
    client.post("/login/code/", {"code": "000000"})
    # Right after a failure even the right code waits (django-otp's throttle: 1 s, doubling).
    assert client.post("/login/code/", {"code": code_for(secret, steps_ahead=1)}).status_code == 400
    time.sleep(1.1)
    assert client.post("/login/code/", {"code": code_for(secret, steps_ahead=1)}).status_code == 302


def _required_roles(tmp_path, **env: str):
    from tests.unit.portal.test_production_settings import manage

    base = {"DJANGO_SECRET_KEY": "k" * 50, "SWITCHYARD_VAR_DIR": str(tmp_path)}
    code = "from django.conf import settings; print(settings.SWITCHYARD_2FA_REQUIRED_ROLES)"
    return manage("shell", "--no-imports", "-c", code, env={**base, **env})


def test_production_settings_require_it_of_the_operators_and_debug_of_nobody(tmp_path):
    production = _required_roles(tmp_path)
    assert production.stdout.strip() == "['platform-admin', 'queue-admin', 'finance']"
    assert _required_roles(tmp_path, DJANGO_DEBUG="1").stdout.strip() == "[]"
    off = _required_roles(tmp_path, SWITCHYARD_2FA_REQUIRED_ROLES="")
    assert off.stdout.strip() == "[]"


def test_an_unknown_role_in_the_setting_is_refused_by_name(tmp_path):
    done = _required_roles(tmp_path, SWITCHYARD_2FA_REQUIRED_ROLES="platform-admin,admins")
    assert done.returncode != 0
    assert "SWITCHYARD_2FA_REQUIRED_ROLES: expected a comma-separated list of" in done.stderr
    assert "got 'admins'" in done.stderr


def test_every_role_the_setting_may_name_is_a_role_of_the_console():
    from config.group_map import ROLE_NAMES
    from portal import roles

    assert {name.replace("-", " ") for name in ROLE_NAMES} == set(roles.ROLES)
