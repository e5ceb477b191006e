"""Request bodies over their path's limit are refused before anything reads them
(config/middleware.py, BodyLimit): anonymous ones at the small limit on every path, signed-in
ones at their path's; a chunked body is read up to the limit and no further."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from knox.models import AuthToken

from accounting.services import collector_create
from tests.conftest import descriptor

MiB = 1024 * 1024
ANONYMOUS = 64 * 1024


class Source:
    """A client's body as the server would read it: `size` bytes (endless if None), counting
    what was read."""

    def __init__(self, size: int | None = None, data: bytes = b"") -> None:
        self.data = data
        self.size = len(data) if data else size
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        if self.data:
            part = self.data[self.read_bytes : None if n < 0 else self.read_bytes + n]
            self.read_bytes += len(part)
            return part
        left = (1 << 62) if self.size is None else self.size - self.read_bytes
        n = left if n is None or n < 0 else min(n, left)
        if n > 16 * MiB:
            raise AssertionError("an unbounded read of the body")
        self.read_bytes += n
        return b"x" * n

    def readline(self, n: int = -1) -> bytes:
        return self.read(n)


def post(client: Client, path: str, source: Source, *, length: int | None, **extra: str):
    environ = {"wsgi.input": source, "CONTENT_TYPE": extra.pop("content_type", "application/json")}
    if length is None:
        environ["HTTP_TRANSFER_ENCODING"] = "chunked"
    else:
        environ["CONTENT_LENGTH"] = str(length)
    return client.generic("POST", path, **environ, **extra)


def _refusal(response) -> dict:
    assert response.status_code == 413, response.content[:300]
    assert response["Content-Type"] == "application/json"
    (error,) = response.json()["errors"]
    assert set(error) == {"field", "message", "got"}
    assert error["field"] is None
    return error


@pytest.fixture
def token(researcher) -> str:
    return AuthToken.objects.create(researcher)[1]


@pytest.mark.parametrize(
    "path", ["/login/", "/api/v1/auth/token/", "/api/v1/tasks/batch/", "/simulations/"]
)
def test_it_refuses_an_anonymous_body_over_the_small_limit_on_every_path_unread(db, path):
    source = Source(200 * MiB)
    multipart = "multipart/form-data; boundary=xx"
    response = post(Client(), path, source, length=200 * MiB, content_type=multipart)
    error = _refusal(response)
    assert error["got"] == 200 * MiB
    assert f"the limit without signing in is {ANONYMOUS} bytes" in error["message"]
    assert source.read_bytes == 0


def test_a_login_form_up_to_the_anonymous_limit_passes_and_one_byte_more_does_not(db):
    form = b"username=nobody&password=wrong&pad="
    urlencoded = "application/x-www-form-urlencoded"
    for size, status in ((ANONYMOUS, 200), (ANONYMOUS + 1, 413)):
        body = form + b"x" * (size - len(form))
        response = Client().post("/login/", body, content_type=urlencoded)
        assert response.status_code == status  # 200: the form again, with its error


def test_a_signed_in_user_gets_the_paths_own_larger_limit(browser):
    # 2 MiB is over the site-wide limit but well within a batch's: it reaches the view,
    # which finds it is not JSON.
    source = Source(2 * MiB)
    response = post(browser, "/api/v1/tasks/batch/", source, length=2 * MiB)
    assert response.status_code == 400, response.content[:300]
    assert source.read_bytes == 2 * MiB
    over = Source(16 * MiB + 1)
    error = _refusal(post(browser, "/api/v1/tasks/batch/", over, length=16 * MiB + 1))
    assert error["message"] == (
        f"the request body is {16 * MiB + 1} bytes; "
        f"the limit for /api/v1/tasks/batch/ is {16 * MiB} bytes"
    )
    assert over.read_bytes == 0


def test_other_paths_take_the_site_wide_limit_when_signed_in(browser):
    source = Source(MiB + 1)
    error = _refusal(post(browser, "/api/v1/tasks/1/cancel/", source, length=MiB + 1))
    assert f"is {MiB} bytes" in error["message"]
    assert source.read_bytes == 0


def test_an_api_token_counts_as_signed_in_and_a_bad_one_does_not(token):
    client = Client()
    source = Source(17 * MiB)
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    error = _refusal(post(client, "/api/v1/tasks/batch/", source, length=17 * MiB, **auth))
    assert "the limit for /api/v1/tasks/batch/" in error["message"]
    bad = {"HTTP_AUTHORIZATION": "Token " + "0" * 64}
    error = _refusal(post(client, "/api/v1/tasks/batch/", Source(MiB), length=MiB, **bad))
    assert "without signing in" in error["message"]


def test_a_collectors_token_counts_as_signed_in_for_its_samples(db):
    _, token = collector_create("nas")
    auth = {"HTTP_AUTHORIZATION": f"Collector {token}"}
    # 2 MiB: over the site-wide limit, within the samples' (10,000 samples a request).
    source = Source(2 * MiB)
    response = post(Client(), "/api/v1/usage/samples/", source, length=2 * MiB, **auth)
    assert response.status_code == 400, response.content[:300]  # read, and not JSON
    assert source.read_bytes == 2 * MiB
    error = _refusal(post(Client(), "/api/v1/usage/samples/", Source(2 * MiB), length=2 * MiB))
    assert "without signing in" in error["message"]


def test_a_chunked_anonymous_body_is_read_to_the_limit_and_refused(db):
    source = Source(None)  # a client that never stops sending
    error = _refusal(post(Client(), "/login/", source, length=None))
    assert error["got"] is None
    assert "sent without a length" in error["message"]
    assert ANONYMOUS < source.read_bytes <= ANONYMOUS + 1


def test_a_chunked_body_within_the_limit_reaches_the_view(browser):
    body = json.dumps(descriptor()).encode()
    response = post(browser, "/api/v1/tasks/", Source(data=body), length=None)
    assert response.status_code == 201, response.content[:300]
