"""Browser fixtures: real Chromium against live_server, with a real Celery worker behind it.

The worker and the seeded site come from the integration fixtures: the site is committed
(`transactional_db`) on the local backend, and the worker shares this test's database and
local-backend root, so the page served by live_server shows what the worker did.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.conftest import in_ci
from tests.integration.conftest import (  # noqa: F401 - fixtures re-exported for tests/browser
    local_root,
    purge_broker,
    site,
    start_worker,
    storage_root,
)

# What a page is given to show something: plotly.js (once 4.8 MB) parsed on a busy CI machine
# took more than playwright's default 5 s; a page that never shows it still fails.
expect.set_options(timeout=15_000)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@pytest.fixture
def worker(
    start_worker: Callable[..., subprocess.Popen],  # noqa: F811 - the fixture imported above
) -> subprocess.Popen:
    return start_worker()


@pytest.fixture(autouse=True)
def _needs_chromium() -> None:
    # Checked before any other fixture starts a worker or seeds the database.
    if not os.access(CHROMIUM, os.X_OK):
        message = f"{CHROMIUM} is missing: `make browser-deps` installs it"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def chromium() -> Iterator[object]:
    """Debian's Chromium driven by Playwright (its own browser download does not work here).

    Request it (or `page`) after the fixtures that use the ORM: Playwright's sync API runs an
    event loop in this thread, and Django refuses ORM calls while one runs.
    """
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


# Reports every Content-Security-Policy violation on the console, where the test sees it
# across navigations (the event also covers what Chromium reports only to the page).
_REPORT_CSP = """
document.addEventListener("securitypolicyviolation", function (e) {
  console.error("CSP violation: " + e.violatedDirective + " blocked " + (e.blockedURI || "inline")
                + " at " + e.sourceFile + ":" + e.lineNumber);
});
"""


@pytest.fixture
def page(chromium, live_server, tmp_path) -> Iterator[object]:
    """A fresh page on the live server; a failing test leaves a screenshot in tmp_path.

    Every browser test also fails on a Content-Security-Policy violation: a page that needs
    the policy loosened is broken for real users (`page.csp_violations` lists them)."""
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 800}
    )
    context.set_default_timeout(10_000)
    context.add_init_script(_REPORT_CSP)
    page = context.new_page()
    violations: list[str] = []
    page.csp_violations = violations  # type: ignore[attr-defined]

    def on_console(message) -> None:
        text = message.text
        if "CSP violation" in text or "Content Security Policy" in text:
            violations.append(f"{page.url}: {text}")

    page.on("console", on_console)
    try:
        yield page
    finally:
        try:
            page.screenshot(path=str(tmp_path / "page-at-teardown.png"), full_page=True)
        finally:
            context.close()
    assert not violations, "Content-Security-Policy violations:\n" + "\n".join(violations)
