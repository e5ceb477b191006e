"""Two-factor in real Chromium: a platform admin, whose role requires it, logs in with the
password, is led to set up an authenticator app (the code computed here from the secret the
page shows, as an app would), keeps the recovery codes, and the next login asks for the code."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.unit.portal.test_two_factor import code_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def password_step(page, username: str, password: str) -> None:
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()


def test_a_platform_admin_enrols_then_logs_in_with_a_totp_code(site, settings, page):
    settings.SWITCHYARD_2FA_REQUIRED_ROLES = ["platform-admin", "queue-admin", "finance"]

    password_step(page, "admin", "admin-demo-pass")
    expect(page).to_have_url(re.compile(r"/account/two-factor/\?next="))
    expect(page.get_by_text("Your role requires two-factor")).to_be_visible()
    expect(page.locator(".qr svg")).to_be_visible()
    # Nothing else opens before the app is set up.
    page.goto("/queues/")
    expect(page).to_have_url(re.compile(r"/account/two-factor/"))

    secret = page.locator("#totp-secret").inner_text()
    page.get_by_label("Code from the app").fill(code_for(secret))
    page.get_by_role("button", name="Turn two-factor on").click()
    codes = page.locator("#recovery-codes li code")
    expect(codes).to_have_count(10)
    page.get_by_role("link", name="I have kept them: continue").click()
    expect(page.get_by_role("heading", name="Queues")).to_be_visible()

    page.get_by_role("button", name=re.compile("Log out admin")).click()
    password_step(page, "admin", "admin-demo-pass")
    expect(page.get_by_role("heading", name="Two-factor code")).to_be_visible()
    page.get_by_label("Code").fill("000000")
    page.get_by_role("button", name="Verify").click()
    expect(page.locator("#code-error")).to_contain_text("did not match")
    page.wait_for_timeout(1100)  # a wrong code makes the next try wait a second
    # The enrolment took this step's code; an app shows the next one 30 s later.
    page.get_by_label("Code").fill(code_for(secret, steps_ahead=1))
    page.get_by_role("button", name="Verify").click()
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()
    page.goto("/admin/")
    expect(page.get_by_text("Site administration")).to_be_visible()
