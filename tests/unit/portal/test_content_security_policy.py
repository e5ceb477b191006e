"""Every page answers with a strict Content-Security-Policy, and no page needs it loosened:
no inline script, event handler or style attribute, nothing from another host. (The browser
suite checks that Chromium reports no violation; tests/browser/test_content_security_policy.py.)"""

from __future__ import annotations

import re
from collections import deque
from urllib.parse import urljoin, urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

_LINK = re.compile(r"""(?:href|src|hx-get)="([^"#]+)""")
_INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I)
_HANDLER = re.compile(r"""<[^>]*\son[a-z]+\s*=""", re.I)
_INLINE_STYLE = re.compile(r"""<[^>]*\sstyle\s*=|<style[\s>]""", re.I)
_OTHER_HOST = re.compile(r"""(?:src|href)="(?:https?:)?//""", re.I)
# Pages that change something, or are downloads rather than pages.
_SKIP = re.compile(r"/(logout|export|download)|format=(csv|xlsx)|\.(csv|xlsx|zip)\b")


def _directives(header: str) -> dict[str, list[str]]:
    out = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def crawl(client: Client, start: list[str], limit: int = 200) -> dict[str, object]:
    """GET every page reachable from `start` by its links (this site's own), up to `limit`."""
    seen: dict[str, object] = {}
    shapes: dict[str, int] = {}
    todo = deque(start)
    while todo and len(seen) < limit:
        url = todo.popleft()
        if url in seen or _SKIP.search(url):
            continue
        if url.startswith("/admin/") and "?" in url:
            continue  # the console's filters and orderings: the same page again
        shape = re.sub(r"[0-9a-f]{16,}|\d+", "N", url)  # a few of each: /config/1/, /config/2/
        shapes[shape] = shapes.get(shape, 0) + 1
        if shapes[shape] > 2:
            continue
        answer = client.get(url)
        seen[url] = answer
        if answer.status_code != 200 or "text/html" not in answer.get("Content-Type", ""):
            continue
        for link in _LINK.findall(answer.content.decode()):
            link = link.replace("&amp;", "&")
            target = urlsplit(urljoin(url, link))
            if target.netloc or target.path.startswith("/static/"):
                continue
            todo.append(target.path + (f"?{target.query}" if target.query else ""))
    return seen


def test_every_page_answers_with_a_strict_policy_and_needs_nothing_inline(site, api):
    assert submit(api, descriptor(name="csp-crawl")).status_code == 201
    client = Client()
    client.force_login(User.objects.get(username="admin"))
    pages = crawl(client, ["/", "/login/", "/api/v1/docs/", "/tasks/", "/submit/"])
    html = {u: a for u, a in pages.items() if "text/html" in a.get("Content-Type", "")}
    assert len(html) > 25, sorted(pages)  # the crawl reached the site, not one page
    for url, answer in pages.items():
        header = answer.get("Content-Security-Policy")
        assert header, f"{url} answered without a Content-Security-Policy"
        policy = _directives(header)
        assert policy["default-src"] == ["'self'"], (url, header)
        assert policy["script-src"] == ["'self'"], (url, header)
        assert "'unsafe-inline'" not in header and "'unsafe-eval'" not in header, (url, header)
        assert policy["object-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    for url, answer in html.items():
        text = answer.content.decode()
        assert not _INLINE_SCRIPT.search(text), f"{url} has an inline <script>"
        assert not _HANDLER.search(text), f"{url} has an inline event handler"
        assert not _INLINE_STYLE.search(text), f"{url} has an inline style"
        assert not _OTHER_HOST.search(text), f"{url} loads something from another host"


def test_the_api_docs_page_loads_swagger_ui_and_its_start_up_from_this_site(site, browser):
    page = browser.get("/api/v1/docs/")
    assert page.status_code == 200
    scripts = re.findall(r'<script src="([^"]+)"', page.content.decode())
    assert any("swagger-ui-bundle.js" in s and s.startswith("/static/") for s in scripts)
    start_up = [s for s in scripts if s.startswith("/api/v1/docs/")]
    assert start_up, scripts  # the script that points Swagger UI at the schema
    script = browser.get(start_up[0].replace("&amp;", "&"))
    assert script.status_code == 200 and "/api/v1/schema/" in script.content.decode()
