"""While the database is away (a restart), requests answer 503 with `Retry-After` — in the
API's error shape for the API, a small page for the pages — never Django's HTML 500.

The database is made unreachable for real: the connection is pointed at a port nobody listens
on (PostgreSQL) or a file that cannot be opened (SQLite), so the driver itself raises.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from django.db import connection

from tests.conftest import descriptor, submit


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again at once: connecting to it is refused


@pytest.fixture
def database_away(transactional_db) -> Iterator[None]:
    saved = dict(connection.settings_dict)
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-folder/switchyard.sqlite3"
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT=str(_dead_port()))
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def _assert_retry_after(response) -> None:
    assert response.status_code == 503, response.content[:500]
    assert int(response["Retry-After"]) > 0


def test_a_submission_while_the_database_is_away_is_a_503_in_the_error_shape(api, database_away):
    response = submit(api, descriptor())
    _assert_retry_after(response)
    [error] = response.json()["errors"]
    assert error["field"] is None and "database" in error["message"]


def test_a_page_while_the_database_is_away_is_a_small_503_page(browser, database_away):
    browser.raise_request_exception = False  # what a real client gets, not the exception
    response = browser.get("/")  # the session is read first, in a middleware
    _assert_retry_after(response)
    assert response["Content-Type"].startswith("text/html")
    assert b"Back in a moment" in response.content


def test_an_api_request_that_fails_in_a_middleware_is_a_503_in_the_error_shape(
    browser, database_away
):
    browser.raise_request_exception = False
    response = browser.get("/api/v1/tasks/")  # the session middleware meets the database
    _assert_retry_after(response)
    assert response.json()["errors"][0]["field"] is None
