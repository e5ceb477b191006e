"""The front (docker/nginx/switchyard.conf) before a real gunicorn of the portal, and the
portal's own body limits (config/middleware.py) with nothing before it.

Debian's nginx runs the shipped config with only its ports and paths replaced, as this test's
own process; gunicorn runs the command line `make run` and the image use. Slow and oversized
clients come from 127.0.0.1, the client that must still be served from 127.0.0.2 (another
address, as another user would be).
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import re
import select
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from config.runtime.serve import web_argv
from tests.conftest import ROOT

NGINX = "/usr/sbin/nginx"
MiB = 1024 * 1024
ANONYMOUS = 64 * 1024
pytestmark = pytest.mark.skipif(
    not os.path.exists(NGINX), reason="needs Debian's nginx (make test installs nginx-light)"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(config: str, replacements: dict[str, str]) -> str:
    """The shipped config with each of its deployment's values replaced; each must be there
    exactly once, so that the test fails when the config changes shape under it."""
    for old, new in replacements.items():
        assert config.count(old) == 1, f"{old!r} is in the shipped config {config.count(old)} times"
        config = config.replace(old, new)
    return config


@dataclass
class Front:
    https: int
    http: int
    portal: int
    ca: Path
    tmp: Path  # gunicorn's TMPDIR
    body_temp: Path  # nginx's client_body_temp_path
    access_log: Path  # gunicorn's
    nginx: subprocess.Popen
    gunicorn: subprocess.Popen

    def pids(self) -> list[int]:
        return _tree(self.nginx.pid) + _tree(self.gunicorn.pid)


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit():
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo.extend(children.get(found[-1], []))
    return found


def written(pids: list[int]) -> int:
    """Bytes these processes have written, to files, pipes and sockets alike."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                if line.startswith("wchar:"):
                    total += int(line.split()[1])
    return total


def _wait_for_port(port: int, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def _warm(front: Front, https: int, log: Path) -> None:
    """Each gunicorn worker's first requests load what the later ones reuse: the tests
    measure once 12 answers, 4 at a time, are all 200s. A first load slower than a
    request's 10 s (a busy machine) costs a retry, not the module; after a minute without
    that the fixture fails with the answers and the portal's log."""
    deadline = time.monotonic() + 60
    while True:
        with ThreadPoolExecutor(4) as pool:
            warm = [(front, https, "GET /login/ HTTP/1.1\r\n")] * 12
            answers = list(pool.map(lambda a: _status(*a), warm))
        if set(answers) == {200}:
            return
        assert time.monotonic() < deadline, (answers, log.read_text()[-3000:])


def _status(front: Front, port: int, head: str) -> int | None:
    """The status of one answer over TLS, or None where none came (a cut or timed-out
    connection, an empty answer)."""
    try:
        return request(front, port, head, tls=True)[0]
    except (OSError, IndexError, ValueError):
        return None


@pytest.fixture(scope="module")
def front(tmp_path_factory) -> Iterator[Front]:
    base = tmp_path_factory.mktemp("front")
    var, tmp, prefix = base / "var", base / "tmp", base / "nginx"
    for folder in (var, tmp, prefix):
        folder.mkdir()
    (var / "secret-key").write_text("front-test-" + "k" * 50)
    ca, key = prefix / "cert.pem", prefix / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(ca),
        ],
        check=True,
        capture_output=True,
    )
    https, http, portal = _free_port(), _free_port(), _free_port()
    config = render(
        (ROOT / "docker/nginx/switchyard.conf").read_text(),
        {
            "user www-data;": f"user {getpass.getuser()};",
            "pid /run/nginx.pid;": f"pid {prefix}/nginx.pid;",
            "access_log /dev/stdout;": f"access_log {prefix}/access.log;",
            "listen 80 default_server;": f"listen 127.0.0.1:{http} default_server;",
            "listen 443 ssl http2 default_server;": f"listen 127.0.0.1:{https} ssl http2;",
            "server web:8000;": f"server 127.0.0.1:{portal};",
            "/run/secrets/tls_cert;": f"{ca};",
            "/run/secrets/tls_key;": f"{key};",
            "alias /var/lib/switchyard/staticfiles/;": f"alias {ROOT}/static/;",
            **{
                f"/var/lib/nginx/{name};": f"{prefix}/{name};"
                for name in ("body", "proxy", "fastcgi", "uwsgi", "scgi")
            },
        },
    )
    (prefix / "nginx.conf").write_text(config)
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")} | {
        "SWITCHYARD_VAR_DIR": str(var),
        "TMPDIR": str(tmp),  # where Django would spool an uploaded file
        "DJANGO_DEBUG": "0",
        "DJANGO_ALLOWED_HOSTS": "localhost",
        "SWITCHYARD_TLS": "1",
        "SWITCHYARD_BEHIND_PROXY": "1",
        "SWITCHYARD_TRUSTED_PROXIES": "127.0.0.1",  # the front; clients come from 127.0.0.2
    }
    gunicorn_log, nginx_log = base / "gunicorn.log", prefix / "error.log"
    access_log = base / "access.log"
    with pytest.MonkeyPatch.context() as patch:  # gunicorn trusts what the portal trusts
        patch.setenv("SWITCHYARD_TRUSTED_PROXIES", env["SWITCHYARD_TRUSTED_PROXIES"])
        argv = web_argv(f"127.0.0.1:{portal}", workers=2, threads=2, python=sys.executable)
    argv += [
        "--access-logfile",
        str(access_log),
        "--access-logformat",
        "%(h)s %({x-forwarded-for}i)s %(r)s %(s)s",
    ]
    procs = []
    try:
        with gunicorn_log.open("w") as out:
            procs.append(subprocess.Popen(argv, env=env, cwd=ROOT, stdout=out, stderr=out))
        with nginx_log.open("w") as out:
            procs.append(
                subprocess.Popen(
                    [
                        NGINX,
                        "-p",
                        str(prefix),
                        "-c",
                        str(prefix / "nginx.conf"),
                        "-e",
                        str(nginx_log),
                        "-g",
                        "daemon off;",
                    ],
                    stdout=out,
                    stderr=out,
                )
            )
        _wait_for_port(portal, procs[0], gunicorn_log)
        _wait_for_port(https, procs[1], nginx_log)
        front = Front(https, http, portal, ca, tmp, prefix / "body", access_log, procs[1], procs[0])
        _warm(front, https, gunicorn_log)
        yield front
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(base, ignore_errors=True)


def connect(front: Front, port: int, *, tls: bool, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    if tls:
        context = ssl.create_default_context(cafile=str(front.ca))
        context.set_alpn_protocols(["http/1.1"])
        sock = context.wrap_socket(sock, server_hostname="localhost")
    return sock


def _complete(data: bytes) -> bool:
    head, done, body = data.partition(b"\r\n\r\n")
    length = re.search(rb"(?im)^content-length: *([0-9]+)", head)
    return bool(done and length and len(body) >= int(length.group(1)))


def read_answer(sock: socket.socket, data: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """Status, headers and body of one answer (read to its length, or to the end), after
    the `data` of it already read."""
    with contextlib.suppress(OSError):
        while not _complete(data) and (chunk := sock.recv(65536)):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
    return int(lines[0].split()[1]), headers, body


def request(front: Front, port: int, head: str, *, tls: bool, source: str = "127.0.0.1"):
    with connect(front, port, tls=tls, source=source) as sock:
        sock.sendall(f"{head}Host: localhost\r\nConnection: close\r\n\r\n".encode())
        return read_answer(sock)


def _answered(sock: socket.socket) -> bytes | None:
    """What has arrived of an answer; None while nothing has (TLS's own records, such as
    session tickets, are no answer)."""
    if not select.select([sock], [], [], 0)[0]:
        return None
    sock.setblocking(False)
    try:
        return sock.recv(65536)  # b"": the server closed the connection
    except (ssl.SSLWantReadError, BlockingIOError):
        return None
    except OSError:
        return b""
    finally:
        sock.setblocking(True)


def send_until_answered(
    sock: socket.socket, head: bytes, first: bytes, size: int, *, chunked: bool
) -> tuple[int, bytes]:
    """Send `head`, then the body: `first`, then up to `size` bytes more, stopping as soon as
    an answer arrives; returns the body bytes sent and what arrived of the answer."""
    sock.sendall(head)
    sent = 0
    while sent < size:
        if (arrived := _answered(sock)) is not None:
            return sent, arrived
        block = (first if sent == 0 else b"") + b"\0" * 65536
        try:
            sock.sendall(b"%x\r\n%s\r\n" % (len(block), block) if chunked else block)
        except OSError:
            break  # the server closed its side: it will not read more
        sent += len(block)
    return sent, b""


def post_body(front: Front, port: int, *, tls: bool, size: int, chunked: bool, extra: str = ""):
    """A multipart POST to /login/ of a file of `size` bytes, as a browser sends a form."""
    first = b'--xx\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n'
    last = b"\r\n--xx--\r\n"
    length = len(first) + size + len(last)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
    head = (
        f"POST /login/ HTTP/1.1\r\nHost: localhost\r\n{extra}"
        f"Content-Type: multipart/form-data; boundary=xx\r\n{framing}\r\n\r\n"
    ).encode()
    with connect(front, port, tls=tls) as sock:
        sent, arrived = send_until_answered(sock, head, first, size, chunked=chunked)
        if sent >= size and not arrived:  # all of it went: end the form, as a browser does
            sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(last), last) if chunked else last)
        return (*read_answer(sock, arrived), sent)


def _error(body: bytes) -> dict:
    (error,) = json.loads(body)["errors"]
    assert set(error) == {"field", "message", "got"}
    return error


def _nothing_on_disk(front: Front) -> None:
    assert list(front.tmp.iterdir()) == []
    assert not front.body_temp.exists() or list(front.body_temp.iterdir()) == []


def _waiting(sock: ssl.SSLSocket) -> bool:
    """Connected, with nothing answered: a read finds no data (TLS's own records, such as
    session tickets, may be there) and no end of the connection."""
    sock.setblocking(False)
    try:
        return sock.recv(1) is None
    except ssl.SSLWantReadError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


# --- through the front -------------------------------------------------------------------------


def test_slow_clients_leave_another_client_answered_within_a_second(front):
    slow = []
    try:
        for _ in range(32):  # more than gunicorn's threads (2 workers x 2 here; 3 x 4 by default)
            sock = connect(front, front.https, tls=True)
            sock.sendall(b"GET /login/ HTTP/1.1\r\nHost: localhost\r\n")
            slow.append(sock)
        times = []
        for _ in range(5):
            for sock in slow:  # one more header line each, never the end of the head
                sock.sendall(b"X-Slow: 1\r\n")
            started = time.monotonic()
            status, _, _ = request(
                front, front.https, "GET /login/ HTTP/1.1\r\n", tls=True, source="127.0.0.2"
            )
            times.append(time.monotonic() - started)
            assert status == 200
            time.sleep(0.2)
        # The slow clients are all still connected and unanswered: they were held, not cut.
        assert all(_waiting(sock) for sock in slow)
    finally:
        for sock in slow:
            sock.close()
    assert max(times) < 1.0, times


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_200_mib_anonymous_body_is_refused_with_nothing_written(front, chunked):
    pids = front.pids()
    before, logged = written(pids), front.access_log.read_text()
    status, headers, body, sent = post_body(
        front, front.https, tls=True, size=200 * MiB, chunked=chunked
    )
    assert status == 413, body[:300]
    assert headers["content-type"] == "application/json"
    assert "over the limit" in _error(body)["message"]
    assert sent < 16 * MiB  # answered at once, not after the body
    assert written(pids) - before < 64 * 1024  # log lines and the answer; no body
    _nothing_on_disk(front)
    assert front.access_log.read_text() == logged  # gunicorn never saw it


def test_the_front_redirects_to_https_sets_forwarded_headers_and_serves_static(front):
    status, headers, _ = request(front, front.http, "GET /login/?next=/ HTTP/1.1\r\n", tls=False)
    assert status == 301 and headers["location"] == "https://localhost/login/?next=/"
    # A client's own X-Forwarded-* never reaches the portal: with a forged "http" the portal
    # (HTTPS only) would redirect, and the address it logs is the client's real one.
    forged = "X-Forwarded-Proto: http\r\nX-Forwarded-For: 203.0.113.9\r\n"
    status, _, _ = request(
        front, front.https, f"GET /login/ HTTP/1.1\r\n{forged}", tls=True, source="127.0.0.2"
    )
    assert status == 200
    # gunicorn writes its access line after the answer has gone: wait for it.
    deadline = time.monotonic() + 10
    while "127.0.0.1 127.0.0.2 GET /login/" not in front.access_log.read_text():
        assert time.monotonic() < deadline, front.access_log.read_text()
        time.sleep(0.1)
    assert "203.0.113.9" not in front.access_log.read_text()
    status, headers, body = request(
        front, front.https, "GET /static/switchyard.css HTTP/1.1\r\n", tls=True
    )
    assert status == 200 and body == (ROOT / "static/switchyard.css").read_bytes()
    assert "immutable" in headers["cache-control"]
    assert "/static/" not in front.access_log.read_text()  # nginx's own, never gunicorn's


# --- the portal alone ----------------------------------------------------------------------------


def _csrf(front: Front) -> str:
    """A CSRF cookie and its token, so the refusal below is the body limit's, not CSRF's."""
    status, headers, _ = request(
        front, front.portal, "GET /login/ HTTP/1.1\r\nX-Forwarded-Proto: https\r\n", tls=False
    )
    assert status == 200
    token = re.search(r"csrftoken=([A-Za-z0-9]+)", headers["set-cookie"]).group(1)
    return (
        f"X-Forwarded-Proto: https\r\nCookie: csrftoken={token}\r\nX-CSRFToken: {token}\r\n"
        "Referer: https://localhost/login/\r\n"
    )


def test_the_portal_refuses_a_declared_200_mib_body_before_reading_it(front):
    extra = _csrf(front)
    pids = _tree(front.gunicorn.pid)
    before = written(pids)
    status, headers, body, _ = post_body(
        front, front.portal, tls=False, size=200 * MiB, chunked=False, extra=extra
    )
    assert status == 413, body[:300]
    error = _error(body)
    assert error["got"] > 200 * MiB
    assert f"the limit without signing in is {ANONYMOUS} bytes" in error["message"]
    assert written(pids) - before < 64 * 1024  # the answer and a log line
    _nothing_on_disk(front)


def test_the_portal_cuts_a_chunked_body_at_its_limit(front):
    extra = _csrf(front)
    status, _, body, _ = post_body(
        front, front.portal, tls=False, size=200 * MiB, chunked=True, extra=extra
    )
    assert status == 413, body[:300]
    assert "sent without a length" in _error(body)["message"]
    _nothing_on_disk(front)
