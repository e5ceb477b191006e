"""The sandbox pages: the live sandboxes of the user's projects and one's exec history."""

from __future__ import annotations

import pytest

from tests.unit.scheduling.sandboxes.helpers import create, run

pytestmark = pytest.mark.django_db


def test_the_list_and_the_terminal_show_state_and_history(api, browser, outsider_browser):
    sid = create(api).json()["id"]
    run(api, sid, ["echo", "hello", "there"])
    run(api, sid, ["false"])
    listing = browser.get("/sandboxes/?project=materials").content.decode()
    assert sid in listing and "ready" in listing
    page = browser.get(f"/sandboxes/{sid}/").content.decode()
    assert "$ echo hello there" in page and "hello there" in page
    assert "[exit 1 ·" in page and "[exit 0 ·" in page
    assert outsider_browser.get(f"/sandboxes/{sid}/").status_code == 404
    assert sid not in outsider_browser.get("/sandboxes/").content.decode()
    ended = browser.post(f"/sandboxes/{sid}/end/")
    assert ended.status_code == 302
    assert "deleted" in browser.get(f"/sandboxes/{sid}/").content.decode()
