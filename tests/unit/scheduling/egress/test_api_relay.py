"""A batch agent task's way to the sandbox API: the relay passes requests under
/api/v1/sandboxes/ to the real portal (live_server) and answers everything else 403 itself
(docs/sandbox-network.md). From the host's side and from inside a real sandbox."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from scheduling.backends.imagebox import CannotRun
from scheduling.backends.images.cache import CachedImage
from scheduling.backends.images.layout import ImageConfig
from scheduling.backends.local import sessionplan
from scheduling.backends.local.jobstore import JobStore
from scheduling.backends.session import apirelay, egress
from scheduling.spec import TaskSpec
from tests.conftest import in_ci
from tests.unit.scheduling.egress.helpers import in_sandbox, run_as, session_folder

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("the relay and the sandbox run as switchyard-job: needs root")

MARK = b"switchyard sandbox-api relay:"


@pytest.fixture
def token(transactional_db) -> str:
    """A real API token of a real user (knox's, as the portal checks it)."""
    from django.contrib.auth.models import User
    from knox.models import AuthToken

    user = User.objects.create_user("relay-user", password="x")
    return AuthToken.objects.create(user)[1]


@pytest.fixture
def relay(live_server, job_root) -> Iterator[tuple[object, str]]:
    """(session folder, socket path) of a relay to live_server, as the job's account."""
    folder = session_folder(job_root)
    path = str(folder / "api.sock")
    handle = apirelay.start(path, urlsplit(live_server.url).netloc, run_as=run_as())
    yield folder, path
    egress.stop(handle)


def ask(address: str | tuple[str, int], request: bytes) -> bytes:
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    with socket.socket(family) as s:
        s.settimeout(20)
        s.connect(address)
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def get(path: str, token: str, host: str = "x") -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Token {token}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()


def test_a_sandbox_api_request_reaches_the_portal_as_if_asked_directly(relay, live_server, token):
    _, path = relay
    portal = urlsplit(live_server.url)
    for target in ("/api/v1/sandboxes/", "/api/v1/sandboxes/sb-none/exec/"):
        direct = ask((portal.hostname, portal.port), get(target, token, portal.netloc))
        relayed = ask(path, get(target, token))
        assert MARK not in relayed
        assert status(relayed) == status(direct), (relayed[:300], direct[:300])


@pytest.mark.parametrize(
    "target",
    [
        "/api/v1/tasks/",
        "/api/v1/sandboxes/../tasks/",
        "/api/v1/sandboxes/%2e%2e/tasks/",
        "/api/v1/sandboxes/%2E%2e%2Ftasks/",
        "/api/v1/sandboxes//api/v1/tasks/",
        "/api/v1/sandboxes/x\\..\\..\\tasks/",
        "http://127.0.0.1/api/v1/sandboxes/",
        "/admin/",
    ],
)
def test_anything_but_the_sandbox_api_is_refused_by_the_relay(relay, live_server, token, target):
    _, path = relay
    portal = urlsplit(live_server.url)
    # The portal itself would answer the token's owner (so the refusal is the relay's).
    direct = ask((portal.hostname, portal.port), get("/api/v1/tasks/", token, portal.netloc))
    assert status(direct) == 200
    answer = ask(path, get(target, token))
    assert status(answer) == 403 and MARK in answer, answer[:300]


def test_a_body_is_passed_on_by_its_length_only_and_one_request_per_connection(relay, token):
    _, path = relay
    head = f"POST /api/v1/sandboxes/ HTTP/1.1\r\nAuthorization: Token {token}\r\n"
    chunked = ask(path, (head + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n").encode())
    assert status(chunked) == 403 and b"Content-Length" in chunked
    twice = ask(path, (head + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}").encode())
    assert status(twice) == 403
    smuggled = (head + "Content-Length: 2\r\n\r\n{}").encode() + get("/api/v1/tasks/", token)
    answer = ask(path, smuggled)
    assert MARK not in answer and answer.count(b"HTTP/1.") == 1, answer[:400]
    huge = ask(path, (head + f"X-Pad: {'a' * 20000}\r\n\r\n").encode())
    assert status(huge) == 431


def test_the_portal_gets_its_own_host_and_no_forwarding_headers_from_the_client():
    head, length = apirelay.api_head(
        b"PUT /api/v1/sandboxes/sb-1/files/a.txt HTTP/1.1\r\nHost: evil\r\n"
        b"X-Forwarded-For: 10.0.0.1\r\nForwarded: for=1.2.3.4\r\nConnection: keep-alive\r\n"
        b"Authorization: Token abc\r\nContent-Length: 5",
        "127.0.0.1:8000",
    )
    lines = head.decode().split("\r\n")
    assert lines[0] == "PUT /api/v1/sandboxes/sb-1/files/a.txt HTTP/1.1" and length == 5
    assert lines[1:] == [
        "Host: 127.0.0.1:8000",
        "Authorization: Token abc",
        "Content-Length: 5",
        "Connection: close",
        "",
        "",
    ]


PROBE = r"""
import json, sys, urllib.error, urllib.request
out = {}
for path in sys.argv[1:]:
    request = urllib.request.Request("http://127.0.0.1:8001" + path)
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            out[path] = [answer.status, answer.read(200).decode()]
    except urllib.error.HTTPError as exc:
        out[path] = [exc.code, exc.read(200).decode()]
    except OSError as exc:
        out[path] = ["error", str(exc)]
print(json.dumps(out))
"""


def test_from_inside_a_sandbox_only_the_sandbox_api_answers(relay, live_server):
    folder, _ = relay
    portal = urlsplit(live_server.url)
    done = in_sandbox(
        folder,
        PROBE,
        "/api/v1/sandboxes/",
        "/api/v1/tasks/",
        sockets={"api.sock": 8001},
        env={"no_proxy": "*"},
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    direct = ask((portal.hostname, portal.port), get("/api/v1/sandboxes/", "none", portal.netloc))
    assert got["/api/v1/sandboxes/"][0] == status(direct)
    assert got["/api/v1/tasks/"][0] == 403 and MARK.decode() in got["/api/v1/tasks/"][1]


def test_a_task_with_sandboxes_in_an_image_without_python3_is_refused_naming_it(tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr" / "bin").mkdir(parents=True)
    image = CachedImage(
        "sha256:" + "0" * 64, "registry.example/base:1", rootfs, ImageConfig(), 0, 0, 0, 0.0, 0.0
    )
    spec = dataclasses.replace(
        TaskSpec.from_dict({"name": "t", "project": "p", "command": ["true"]}), sandboxes=True
    )
    with pytest.raises(CannotRun) as refused:
        sessionplan.api_relay(JobStore(str(tmp_path)), "k", spec, {}, "127.0.0.1:8000", image)
    assert "registry.example/base:1 has no python3 (looked for /usr/local/bin/python3" in str(
        refused.value
    )
