"""API tokens expire, rotate and die with the password; failed logins are locked out."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from knox.models import AuthToken

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token/"


def obtain(client: Client, username="alice", password="alice-demo-pass"):
    return client.post(TOKEN_URL, {"username": username, "password": password})


def tasks(client: Client, token: str):
    return client.get("/api/v1/tasks/", HTTP_AUTHORIZATION=f"Token {token}")


def test_a_token_is_issued_hashed_with_an_expiry_and_works(site, client):
    answer = obtain(client)
    assert answer.status_code == 200
    token, expiry = answer.json()["token"], answer.json()["expiry"]
    assert expiry is not None
    assert tasks(client, token).status_code == 200
    # Only a digest is stored: the database holds nothing that authenticates.
    assert not AuthToken.objects.filter(digest=token).exists()
    assert all(token not in row.digest for row in AuthToken.objects.all())


def test_wrong_credentials_answer_the_error_shape(site, client):
    answer = obtain(client, password="wrong")
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["message"] == "wrong username or password"
    missing = client.post(TOKEN_URL, {"username": "alice"})
    assert missing.status_code == 400
    assert missing.json()["errors"][0]["field"] == "password"


def test_an_expired_token_is_refused(site, client):
    token = obtain(client).json()["token"]
    AuthToken.objects.update(expiry=timezone.now() - timedelta(seconds=1))
    refused = tasks(client, token)
    assert refused.status_code == 401
    assert refused.json()["errors"][0]["message"] == "Invalid token."


def test_rotation_gives_a_new_token_and_ends_the_old_one(site, client):
    old = obtain(client).json()["token"]
    rotated = client.post(TOKEN_URL + "current/", HTTP_AUTHORIZATION=f"Token {old}")
    assert rotated.status_code == 200
    new = rotated.json()["token"]
    assert new != old
    assert tasks(client, new).status_code == 200
    assert tasks(client, old).status_code == 401


def test_a_token_can_be_revoked_alone(site, client):
    laptop = obtain(client).json()["token"]
    pipeline = obtain(client).json()["token"]
    assert (
        client.delete(TOKEN_URL + "current/", HTTP_AUTHORIZATION=f"Token {laptop}").status_code
        == 204
    )
    assert tasks(client, laptop).status_code == 401
    assert tasks(client, pipeline).status_code == 200


def test_a_password_change_revokes_every_token(site, client):
    token = obtain(client).json()["token"]
    assert tasks(client, token).status_code == 200
    alice = User.objects.get(username="alice")
    alice.set_password("a-new-and-longer-pass")
    alice.save()
    assert tasks(client, token).status_code == 401
    assert not AuthToken.objects.filter(user=alice).exists()


def test_failed_token_requests_lock_out_the_username_from_that_address(site, client, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert obtain(client, password="guess").status_code == 400
    assert obtain(client, password="guess").status_code == 429  # the limit: locked out
    locked = obtain(client)  # the right password, too late
    assert locked.status_code == 429
    assert locked.json()["errors"][0]["message"].startswith("too many failed logins")
    assert int(locked["Retry-After"]) == settings.AXES_COOLOFF_TIME.total_seconds()
    # Another researcher, from the same address, is not locked out.
    assert obtain(client, "bob", "bob-demo-pass").status_code == 200


def test_failed_logins_on_the_page_lock_out_too(site, client, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        page = client.post("/login/", {"username": "alice", "password": "guess"})
        assert page.status_code == 200 and b"did not match" in page.content
    assert client.post("/login/", {"username": "alice", "password": "x"}).status_code == 429
    locked = client.post("/login/", {"username": "alice", "password": "alice-demo-pass"})
    assert locked.status_code == 429
    assert b"Too many failed logins for this username" in locked.content
    # The page and the API share the count: the token endpoint is locked as well.
    assert obtain(client).status_code == 429


def test_a_success_resets_the_count(site, client, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        obtain(client, password="guess")
    assert obtain(client).status_code == 200
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        obtain(client, password="guess")
    assert obtain(client).status_code == 200


def test_the_token_endpoint_is_rate_limited_per_address(site, client, monkeypatch):
    from rest_framework.throttling import ScopedRateThrottle

    # The rate is read when the throttle class is defined; the site's is 30/min.
    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"auth": "3/min"})
    assert [obtain(client).status_code for _ in range(4)] == [200, 200, 200, 429]
    assert obtain(client).json()["errors"][0]["message"].startswith("Request was throttled")


def test_the_demo_seed_prints_tokens_that_work(db, client, capsys):
    from django.core.management import call_command

    call_command("seed_demo", backend="fake")
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.strip().startswith("alice "))
    token = line.split()[-1]
    assert tasks(client, token).status_code == 200
