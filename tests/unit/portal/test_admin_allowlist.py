"""The admin console and the console pages of admins answer only allowed addresses; behind a
trusted proxy the forwarded address is the one that counts (docs/security.md, "Address
allow-lists")."""

from __future__ import annotations

import ipaddress
import secrets

import pytest
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client, RequestFactory

from config.allowlist import address_allowed, allowed_from
from tests.unit.portal.test_production_settings import manage

PROXY = "10.0.0.2"


def nets(*items: str) -> list:
    return [ipaddress.ip_network(item) for item in items]


@pytest.fixture
def admin_page(site) -> Client:
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    return client


@pytest.fixture
def office_only(settings):
    settings.SWITCHYARD_ADMIN_ALLOW = nets("192.0.2.0/24", "2001:db8::/32")


def test_an_admin_page_from_an_address_not_allowed_is_refused(admin_page, office_only):
    refused = admin_page.get("/admin/", REMOTE_ADDR="198.51.100.7")
    assert refused.status_code == 403
    text = refused.content.decode()
    assert "not allowed from this address" in text and "198.51.100.7" in text
    assert "Traceback" not in text and "SWITCHYARD_ADMIN_ALLOW" not in text
    assert admin_page.get("/admin/", REMOTE_ADDR="192.0.2.40").status_code == 200
    assert admin_page.get("/admin/", REMOTE_ADDR="2001:db8::5").status_code == 200


@pytest.mark.parametrize(
    "path", ["/config/", "/capacity/", "/dashboard/site/", "/simulations/", "/admin/login/"]
)
def test_the_console_pages_are_refused_too(admin_page, office_only, path):
    assert admin_page.get(path, REMOTE_ADDR="198.51.100.7").status_code == 403
    assert admin_page.get(path, REMOTE_ADDR="192.0.2.40").status_code in (200, 302)


def test_other_pages_and_the_api_stay_open(admin_page, office_only):
    assert admin_page.get("/", REMOTE_ADDR="198.51.100.7").status_code == 200
    assert admin_page.get("/api/v1/queues/", REMOTE_ADDR="198.51.100.7").status_code == 200


def test_an_empty_list_allows_everyone(admin_page, settings):
    settings.SWITCHYARD_ADMIN_ALLOW = []
    assert admin_page.get("/admin/", REMOTE_ADDR="198.51.100.7").status_code == 200


def test_a_forwarded_address_counts_only_from_a_trusted_proxy(admin_page, office_only, settings):
    # Not a trusted proxy: its X-Forwarded-For is a client's claim, never believed.
    forged = admin_page.get("/admin/", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="192.0.2.40")
    assert forged.status_code == 403
    settings.TRUSTED_PROXIES = nets(PROXY)
    allowed = admin_page.get("/admin/", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="192.0.2.40")
    assert allowed.status_code == 200
    # Through the trusted proxy, an outside client is refused however it writes the header:
    # the proxy appends the address it saw, the rightmost one.
    outside = admin_page.get(
        "/admin/", REMOTE_ADDR=PROXY, HTTP_X_FORWARDED_FOR="192.0.2.40, 198.51.100.7"
    )
    assert outside.status_code == 403
    # The proxy's own address is no pass: it is not in the list.
    assert admin_page.get("/admin/", REMOTE_ADDR=PROXY).status_code == 403


def test_a_view_guards_itself_with_a_list_of_its_own(settings):
    settings.SWITCHYARD_TEST_ALLOW = nets("127.0.0.1/32")

    @allowed_from("SWITCHYARD_TEST_ALLOW")
    def view(request):
        return HttpResponse("ok")

    factory = RequestFactory()
    assert view(factory.get("/metrics", REMOTE_ADDR="127.0.0.1")).status_code == 200
    assert view(factory.get("/metrics", REMOTE_ADDR="10.9.9.9")).status_code == 403
    assert address_allowed(factory.get("/", REMOTE_ADDR="10.9.9.9"), []) is True
    assert (
        address_allowed(factory.get("/", REMOTE_ADDR="not an address"), nets("0.0.0.0/0")) is False
    )


def test_malformed_lists_stop_the_portal(tmp_path):
    env = {"DJANGO_SECRET_KEY": secrets.token_urlsafe(50), "SWITCHYARD_VAR_DIR": str(tmp_path)}
    bad = manage("check", env={**env, "SWITCHYARD_ADMIN_ALLOW": "10.0.0.5/16"})
    assert bad.returncode != 0 and "SWITCHYARD_ADMIN_ALLOW: expected IP addresses" in bad.stderr
    path = manage("check", env={**env, "SWITCHYARD_ADMIN_PATHS": "admin/"})
    assert path.returncode != 0
    assert (
        "SWITCHYARD_ADMIN_PATHS: expected path prefixes starting with /, got 'admin/'"
        in path.stderr
    )
