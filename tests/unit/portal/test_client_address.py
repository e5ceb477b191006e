"""Who a request comes from: the socket peer, or behind a trusted proxy the client it names.
The login lockout, the per-username pace and the token endpoint's throttle all count by it."""

from __future__ import annotations

import ipaddress
import time

import pytest
from axes.models import AccessAttempt
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from config.env import env_networks
from config.proxies import derive_client_address
from portal.auth import pace_delay
from portal.models import AuditEvent
from tests.unit.portal.test_production_settings import manage

TOKEN_URL = "/api/v1/auth/token/"
PROXY = "10.0.0.2"  # the reverse proxy in front of the portal, when one is trusted


def nets(*items: str) -> list:
    return [ipaddress.ip_network(item) for item in items]


def obtain(
    client: Client,
    *,
    peer: str,
    forwarded: str | None = None,
    password="alice-demo-pass",
    username="alice",
):
    headers = {"REMOTE_ADDR": peer}
    if forwarded is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded
    return client.post(TOKEN_URL, {"username": username, "password": password}, **headers)


@pytest.fixture
def behind_proxy(settings):
    settings.TRUSTED_PROXIES = nets(PROXY)


# --- the one derivation ---------------------------------------------------------------------


def test_the_peer_is_the_client_unless_it_is_a_trusted_proxy():
    # A client's own header is never believed, from anywhere but a trusted proxy.
    assert derive_client_address("203.0.113.9", "198.51.100.7", []) == "203.0.113.9"
    assert derive_client_address("127.0.0.1", "198.51.100.7", []) == "127.0.0.1"
    assert derive_client_address("203.0.113.9", "198.51.100.7", nets(PROXY)) == "203.0.113.9"
    # Behind the proxy: the address it appended, whatever the client wrote before it.
    assert derive_client_address(PROXY, "1.2.3.4, 198.51.100.7", nets(PROXY)) == "198.51.100.7"
    # Through two trusted hops: the first address from the right that is not one of them.
    chain = "6.6.6.6, 198.51.100.7, 10.1.0.3"
    assert derive_client_address(PROXY, chain, nets(PROXY, "10.1.0.0/16")) == "198.51.100.7"
    # A trusted proxy that forwards nothing, or only trusted hops: the last hop it vouches for.
    assert derive_client_address(PROXY, None, nets(PROXY)) == PROXY
    assert derive_client_address(PROXY, "10.1.0.3", nets(PROXY, "10.1.0.0/16")) == "10.1.0.3"
    # Ports, brackets, IPv4 written as IPv6; a hop that is not an address stops the walk.
    assert derive_client_address(PROXY, "[2001:db8::5]:443", nets(PROXY)) == "2001:db8::5"
    assert derive_client_address(PROXY, "198.51.100.7:5050", nets(PROXY)) == "198.51.100.7"
    assert derive_client_address("::ffff:203.0.113.9", None, []) == "203.0.113.9"
    assert derive_client_address(PROXY, "x, unknown", nets(PROXY)) == PROXY


def test_the_trusted_proxies_setting_is_read_strictly(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_TRUSTED_PROXIES", " 10.0.0.2, 10.1.0.0/16 ,fd00::/8")
    assert env_networks("SWITCHYARD_TRUSTED_PROXIES") == nets("10.0.0.2", "10.1.0.0/16", "fd00::/8")
    monkeypatch.delenv("SWITCHYARD_TRUSTED_PROXIES")
    assert env_networks("SWITCHYARD_TRUSTED_PROXIES") == []
    for wrong in ("proxy.example.org", "10.0.0.2/16", "10.0.0.300"):
        monkeypatch.setenv("SWITCHYARD_TRUSTED_PROXIES", wrong)
        with pytest.raises(ImproperlyConfigured, match=f"got '{wrong}'"):
            env_networks("SWITCHYARD_TRUSTED_PROXIES")


def test_the_portal_refuses_a_proxy_it_is_not_told_to_trust(tmp_path):
    env = {"DJANGO_SECRET_KEY": "k" * 50, "SWITCHYARD_VAR_DIR": str(tmp_path)}
    done = manage("check", env=env | {"SWITCHYARD_BEHIND_PROXY": "1"})
    assert done.returncode != 0
    assert "SWITCHYARD_BEHIND_PROXY=1 needs SWITCHYARD_TRUSTED_PROXIES" in done.stderr
    # The web server's old setting is not silently ignored: it was renamed.
    done = manage("check", env=env | {"SWITCHYARD_FORWARDED_ALLOW_IPS": "127.0.0.1"})
    assert done.returncode != 0
    assert "replaced by SWITCHYARD_TRUSTED_PROXIES" in done.stderr


# --- the HTTPS header -----------------------------------------------------------------------


def test_only_a_trusted_proxy_says_the_request_came_over_https(db, client, settings):
    settings.TRUSTED_PROXIES = nets(PROXY)
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.SECURE_SSL_REDIRECT = True
    # This host's own address (where jobs run) is not a trusted proxy: redirected to HTTPS.
    forged = client.get("/login/", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_PROTO="https")
    assert forged.status_code == 301
    proxied = client.get("/login/", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_PROTO="https")
    assert proxied.status_code == 200


# --- the lockout ----------------------------------------------------------------------------


def test_behind_a_trusted_proxy_wrong_passwords_lock_out_only_that_client(
    site, client, settings, behind_proxy
):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert (
            obtain(client, peer=PROXY, forwarded="198.51.100.7", password="guess").status_code
            == 400
        )
    assert obtain(client, peer=PROXY, forwarded="198.51.100.7", password="guess").status_code == 429
    assert obtain(client, peer=PROXY, forwarded="198.51.100.7").status_code == 429
    # Every other client of the same proxy still logs in as alice.
    assert obtain(client, peer=PROXY, forwarded="198.51.100.8").status_code == 200
    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"198.51.100.7"}
    # The audit log names the client, not the proxy.
    failed = AuditEvent.objects.filter(action="login.failed").values_list("address", flat=True)
    assert set(failed) == {"198.51.100.7"}


def test_a_job_on_the_portals_host_cannot_lock_out_another_client(site, client, settings):
    # A job at the host's address, forging the address alice logs in from: counted as itself.
    for _ in range(settings.AXES_FAILURE_LIMIT):
        obtain(client, peer="127.0.0.1", forwarded="198.51.100.7", password="guess")
    assert obtain(client, peer="127.0.0.1").status_code == 429
    assert obtain(client, peer="198.51.100.7").status_code == 200
    # With a proxy on the same host, trusted at the host's address, a job connecting from
    # that address with no header of its own is still only itself: the proxy's clients
    # (each with the address the proxy forwards) are not locked out.
    AccessAttempt.objects.all().delete()  # a fresh start
    cache.clear()
    settings.TRUSTED_PROXIES = nets("127.0.0.1")
    for _ in range(settings.AXES_FAILURE_LIMIT):
        obtain(client, peer="127.0.0.1", password="guess")
    assert obtain(client, peer="127.0.0.1").status_code == 429
    assert obtain(client, peer="127.0.0.1", forwarded="198.51.100.7").status_code == 200


# --- the per-username pace ------------------------------------------------------------------


def test_the_pace_grows_with_failures_and_is_capped():
    assert [pace_delay(n, 10, 30) for n in (0, 9, 10, 11, 12, 13, 14, 15, 40, 10**9)] == [
        0,
        0,
        1,
        2,
        4,
        8,
        16,
        30,
        30,
        30,
    ]


def test_failures_from_many_addresses_pace_a_username_but_never_lock_it_out(site, client, settings):
    ceiling = settings.SWITCHYARD_LOGIN_USERNAME_CEILING
    cap = settings.SWITCHYARD_LOGIN_PACE_MAX_SECONDS
    assert obtain(client, peer="192.0.2.1").status_code == 200  # alice's own desk
    # A spray: one wrong password from each of many addresses, no pair near its limit.
    for n in range(1, ceiling + 1):
        assert obtain(client, peer=f"203.0.113.{n}", password="guess").status_code == 400
    # Past the ceiling one attempt at a time: this one takes the turn (and fails) ...
    assert obtain(client, peer="203.0.113.100", password="guess").status_code == 400
    # ... so alice from a new address waits a few seconds, not the cool-off.
    paced = obtain(client, peer="198.51.100.50")
    assert paced.status_code == 429
    wait = int(paced["Retry-After"])
    assert 1 <= wait <= cap < settings.AXES_COOLOFF_TIME.total_seconds()
    assert paced.json()["errors"][0]["message"].startswith(
        "too many failed logins for this username; try again in"
    )
    # The attacker's further tries in the meantime are refused untried, and not counted as
    # failures of their (username, address) pairs.
    for n in range(101, 111):
        assert obtain(client, peer=f"203.0.113.{n}", password="guess").status_code == 429
    assert not AccessAttempt.objects.filter(ip_address__in=["203.0.113.101", "198.51.100.50"])
    # From an address alice logged in from lately she is not paced at all.
    assert obtain(client, peer="192.0.2.1").status_code == 200
    # Her turn comes after the wait.
    time.sleep(wait)
    assert obtain(client, peer="198.51.100.50").status_code == 200
    # The login page is paced alike, and says so.
    page = client.post(
        "/login/", {"username": "alice", "password": "guess"}, REMOTE_ADDR="203.0.113.200"
    )
    assert page.status_code == 429
    assert 1 <= int(page["Retry-After"]) <= cap
    assert b"Too many failed logins for this username; try again in" in page.content


# --- the token endpoint's throttle ----------------------------------------------------------


def test_forged_forwarded_for_from_an_untrusted_peer_does_not_escape_the_throttle(site, client):
    # The site's rate, 30 a minute: 35 requests each naming a new address are still one client.
    answers = [
        obtain(client, peer="127.0.0.1", forwarded=f"203.0.113.{n}").status_code for n in range(35)
    ]
    assert answers.count(200) == 30
    assert answers[30:] == [429] * 5


def test_behind_a_trusted_proxy_the_throttle_counts_each_real_client(
    site, client, monkeypatch, behind_proxy
):
    from rest_framework.throttling import ScopedRateThrottle

    monkeypatch.setattr(ScopedRateThrottle, "THROTTLE_RATES", {"auth": "3/min"})
    # The client writes a new X-Forwarded-For each time; the proxy appends its real address.
    answers = [
        obtain(client, peer=PROXY, forwarded=f"203.0.113.{n}, 198.51.100.7").status_code
        for n in range(4)
    ]
    assert answers == [200, 200, 200, 429]
    assert obtain(client, peer=PROXY, forwarded="198.51.100.8").status_code == 200
