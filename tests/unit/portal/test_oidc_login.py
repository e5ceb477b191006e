"""Single sign-on through a real OpenID Connect code flow: a small provider of the test's own
on a local port (token, userinfo and JWKS endpoints; ID tokens signed RS256 with a key made
here), and mozilla-django-oidc's own views and backend against it — the account made from the
claims, the groups mapped like LDAP's, a forged or misdirected token refused."""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth.models import User
from django.test import Client

from config.group_map import parse_group_map
from config.settings_auth import oidc_settings
from portal.models import Membership

CLIENT_ID, CLIENT_SECRET = "switchyard-portal", "client-secret-for-tests"


class Provider:
    """What the provider will answer: the next code's claims, its signing key and audience."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.signing_key = self.key
        self.audience = CLIENT_ID
        self.claims: dict[str, Any] = {}
        self.nonce = ""
        self.code = ""
        self.access_token = ""
        self.token_requests: list[dict[str, list[str]]] = []

    def jwks(self) -> dict:
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}

    def id_token(self, issuer: str) -> str:
        now = int(time.time())
        payload = {
            "iss": issuer,
            "aud": self.audience,
            "sub": self.claims["sub"],
            "nonce": self.nonce,
            "iat": now,
            "exp": now + 300,
        }
        return jwt.encode(payload, self.signing_key, algorithm="RS256", headers={"kid": "k1"})


def _handler(provider: Provider, issuer: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/jwks":
                return self._answer(200, provider.jwks())
            if self.path == "/userinfo":
                if self.headers.get("Authorization") != f"Bearer {provider.access_token}":
                    return self._answer(401, {"error": "invalid_token"})
                return self._answer(200, provider.claims)
            return self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode())
            provider.token_requests.append(form)
            good = (
                self.path == "/token"
                and form.get("code") == [provider.code]
                and form.get("client_id") == [CLIENT_ID]
                and form.get("client_secret") == [CLIENT_SECRET]
            )
            if not good:
                return self._answer(400, {"error": "invalid_grant"})
            provider.code = ""  # a code is good once
            provider.access_token = secrets.token_urlsafe(16)
            return self._answer(
                200,
                {
                    "access_token": provider.access_token,
                    "token_type": "Bearer",
                    "id_token": provider.id_token(issuer),
                },
            )

    return Handler


@pytest.fixture
def provider() -> Iterator[tuple[Provider, str]]:
    provider = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), lambda *a: None)  # type: ignore[arg-type]
    issuer = f"http://127.0.0.1:{server.server_address[1]}"
    server.RequestHandlerClass = _handler(provider, issuer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield provider, issuer
    server.shutdown()
    server.server_close()


@pytest.fixture
def sso(provider, site, settings, monkeypatch) -> Provider:
    """The portal configured for the provider as an operator would (SWITCHYARD_OIDC_*)."""
    found, issuer = provider
    for name, path in [
        ("CLIENT_SECRET", None),
        ("AUTHORIZATION_ENDPOINT", "/authorize"),
        ("TOKEN_ENDPOINT", "/token"),
        ("USERINFO_ENDPOINT", "/userinfo"),
        ("JWKS_ENDPOINT", "/jwks"),
    ]:
        monkeypatch.setenv(f"SWITCHYARD_OIDC_{name}", issuer + path if path else CLIENT_SECRET)
    for name, value in oidc_settings(CLIENT_ID).items():
        setattr(settings, name, value)
    settings.SWITCHYARD_OIDC = {
        "enabled": True,
        "name": "Example Centre",
        "username_claim": "preferred_username",
        "groups_claim": "groups",
    }
    settings.AUTHENTICATION_BACKENDS = [
        "axes.backends.AxesStandaloneBackend",
        "portal.auth.UsernamePace",
        "portal.sso.SingleSignOnBackend",
        "django.contrib.auth.backends.ModelBackend",
    ]
    settings.SWITCHYARD_GROUP_MAP = parse_group_map(
        json.dumps({"materials-team": ["materials:researcher"], "hpc-ops": ["queue-admin:hpc"]}),
        "test",
    )
    return found


def sign_in(client: Client, provider: Provider, claims: dict, next_url: str = "/queues/"):
    """The browser's part of the code flow: to the provider and back with a code."""
    start = client.get(f"/oidc/authenticate/?next={next_url}")
    assert start.status_code == 302
    asked = parse_qs(urlsplit(start["Location"]).query)
    assert asked["client_id"] == [CLIENT_ID] and asked["response_type"] == ["code"]
    provider.claims, provider.nonce = claims, asked["nonce"][0]
    provider.code = secrets.token_urlsafe(8)
    return client.get(f"/oidc/callback/?code={provider.code}&state={asked['state'][0]}")


CAROL = {
    "sub": "c-123",
    "preferred_username": "carol",
    "email": "carol@example.org",
    "given_name": "Carol",
    "family_name": "Chen",
    "groups": ["materials-team"],
}


def test_the_login_page_offers_the_provider_when_configured(sso, client):
    page = client.get("/login/?next=/queues/")
    assert b"Sign in with Example Centre" in page.content
    assert b'href="/oidc/authenticate/?next=/queues/"' in page.content


def test_without_configuration_there_is_no_button_and_no_flow(site, client):
    assert b"Sign in with" not in client.get("/login/").content
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_a_first_sign_in_makes_the_account_from_the_claims_with_its_groups(sso, client):
    answer = sign_in(client, sso, CAROL)
    assert answer.status_code == 302 and answer["Location"] == "/queues/"
    assert client.get("/queues/").status_code == 200
    carol = User.objects.get(username="carol")
    assert (carol.email, carol.first_name, carol.last_name) == (
        "carol@example.org",
        "Carol",
        "Chen",
    )
    assert not carol.has_usable_password()
    assert dict(carol.memberships.values_list("project__slug", "role")) == {"materials": "member"}
    # The code went back with the portal's own callback address.
    assert sso.token_requests[-1]["redirect_uri"] == ["http://testserver/oidc/callback/"]


def test_the_next_sign_in_updates_the_groups(sso, client):
    sign_in(client, sso, CAROL)
    client.post("/logout/")
    answer = sign_in(client, sso, {**CAROL, "groups": ["hpc-ops"], "email": "c@example.org"})
    assert answer.status_code == 302
    carol = User.objects.get(username="carol")
    assert carol.email == "c@example.org"
    assert not Membership.objects.filter(user=carol).exists()
    assert carol.administered_queues.filter(name="hpc").exists()


def _refused(client: Client, answer, *, forged: bool = False) -> None:
    """A refused sign-in: back to the login page, or for a token that fails its checks a 400
    (Django's answer to the library's SuspiciousOperation, logged as a security event)."""
    if forged:
        assert answer.status_code == 400
    else:
        assert answer.status_code == 302 and answer["Location"] == "/login/"
    assert client.get("/queues/").status_code == 302  # not signed in


def test_a_token_signed_by_another_key_is_refused(sso, client):
    sso.signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _refused(client, sign_in(client, sso, CAROL), forged=True)
    assert not User.objects.filter(username="carol").exists()


def test_a_token_for_another_client_is_refused(sso, client):
    sso.audience = "another-portal"
    _refused(client, sign_in(client, sso, CAROL), forged=True)
    assert not User.objects.filter(username="carol").exists()


def test_a_local_account_is_not_taken_over_by_the_providers_user_of_that_name(sso, client):
    _refused(client, sign_in(client, sso, {**CAROL, "preferred_username": "alice"}))
    alice = User.objects.get(username="alice")
    assert alice.email != "carol@example.org"


def test_a_sign_in_without_a_username_claim_is_refused(sso, client):
    claims = {key: value for key, value in CAROL.items() if key != "preferred_username"}
    _refused(client, sign_in(client, sso, claims))


def test_an_account_switched_off_loses_its_session_and_signs_in_no_more(sso, client):
    sign_in(client, sso, CAROL)
    assert client.get("/queues/").status_code == 200
    User.objects.filter(username="carol").update(is_active=False)
    assert client.get("/queues/").status_code == 302  # the session is over
    _refused(client, sign_in(client, sso, CAROL))
