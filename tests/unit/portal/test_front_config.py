"""The front's config (docker/nginx/switchyard.conf) says what the portal says: the same body
limits per path, and client-address headers set by nginx alone. Read, not run (the front
itself runs in tests/integration/test_front.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from django.conf import settings
from django.urls import reverse

from config.middleware import LARGER_BODIES, STREAMED_BODIES, body_limit
from tests.conftest import ROOT

CONFIG = (ROOT / "docker/nginx/switchyard.conf").read_text()
_UNITS = {"": 1, "k": 1024, "m": 1024 * 1024}


@dataclass(frozen=True)
class Directive:
    blocks: tuple[str, ...]  # the enclosing blocks' headers, outermost first
    block_id: int  # where the innermost block opens: two `server` blocks are two blocks
    name: str
    args: tuple[str, ...]


def directives(text: str) -> list[Directive]:
    found, blocks = [], [("", 0)]
    text = re.sub(r"(?m)^\s*#[^\n]*|\s#[^\n]*", "", text)  # comments (none inside quotes here)
    # A statement ends at ; { or } outside quotes (the error answers' JSON is quoted).
    for statement in re.finditer(r"((?:'[^']*'|\"[^\"]*\"|[^;{}'\"])*)([;{}])", text):
        words, end = statement.group(1).split(), statement.group(2)
        if end == "{":
            blocks.append((" ".join(words), statement.start(2)))
        elif end == "}":
            blocks.pop()
        elif words:
            headers = tuple(header for header, _ in blocks[1:])
            found.append(Directive(headers, blocks[-1][1], words[0], tuple(words[1:])))
    return found


def https_server() -> list[Directive]:
    """The directives of the server that listens with TLS, and of its locations."""
    every = directives(CONFIG)
    (server,) = {d.block_id for d in every if d.name == "listen" and "ssl" in d.args}
    inside, opened = [], False
    for d in every:
        if d.block_id == server:
            opened = True
        elif opened and d.blocks[:2] == ("http", "server") and len(d.blocks) == 2:
            break  # the next server
        if opened:
            inside.append(d)
    return inside


def _size(value: str) -> int:
    number, unit = re.fullmatch(r"([0-9]+)([km]?)", value.lower()).groups()
    return int(number) * _UNITS[unit]


def front_limit(path: str) -> int:
    """What the front lets through to `path`: its exact location's limit, else the server's,
    else the one all servers inherit."""
    server = [d for d in https_server() if d.name == "client_max_body_size"]
    exact = [d for d in server if d.blocks[2:] == (f"location = {path}",)]
    exact += [
        d
        for d in server
        if len(d.blocks) == 3
        and d.blocks[2].startswith("location ^~ ")
        and path.startswith(d.blocks[2].removeprefix("location ^~ "))
    ]
    default = [d for d in server if len(d.blocks) == 2]
    every = [d for d in directives(CONFIG) if d.blocks == ("http",)]
    inherited = [d for d in every if d.name == "client_max_body_size"]
    return _size((exact or default or inherited)[0].args[0])


def test_every_larger_body_path_has_the_portals_limit_at_the_front():
    assert front_limit("/some/page/") == settings.SWITCHYARD_BODY_MAX_BYTES
    for name in LARGER_BODIES:
        path = reverse(name)
        assert front_limit(path) == body_limit(path, authenticated=True), path
    for name in STREAMED_BODIES:
        path = reverse(name) + "area/owner/file"  # a file's path below the root
        assert front_limit(path) == body_limit(path, authenticated=True), path


@pytest.mark.parametrize("path", ["/login/", "/api/v1/auth/token/"])
def test_signing_in_takes_the_anonymous_limit_at_the_front(path):
    assert front_limit(path) == settings.SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS


def test_the_front_buffers_bodies_and_sets_the_client_headers_itself():
    http = {d.name: d.args for d in directives(CONFIG) if d.blocks == ("http",)}
    assert http["proxy_request_buffering"] == ("on",)
    headers = {
        d.args[0].lower(): " ".join(d.args[1:])
        for d in https_server()
        if d.name == "proxy_set_header" and len(d.blocks) == 2
    }
    # Set to the peer's address, never appended to the client's own list.
    assert headers["x-forwarded-for"] == "$remote_addr"
    assert headers["x-forwarded-proto"] == "$scheme"
    assert headers["forwarded"] == '""'
