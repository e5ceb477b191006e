"""A batch agent task's way to the portal's sandbox API, and nothing else of it, on the host
(docs/sandbox-network.md).

A batch `agent` task that asks for sandboxes gets a Unix socket bound into its sandbox (its
network namespace stays empty); the trusted side that runs it calls `start()`, which forks a
keeper (egress.py's, as the job's account) relaying each connection to the portal's web
address. Each connection carries one request: its head (at most HEAD_LIMIT bytes) must name a
path under API_PREFIX that no normalisation can turn into another (no `.` or `..` segment, no
encoded `.`, `/`, `\\` or `%`, no `//`), with at most one Content-Length and no chunked body;
it is passed on with the portal's own Host, `Connection: close` and without the headers that
would speak for the relay (Forwarded, X-Forwarded-*, X-Real-IP), then exactly its body, then
the answer back. Anything else is answered 403 here and never reaches the portal. Whether the
request may act is the portal's to say: the task's scoped token travels in its Authorization
header like any client's.

Standard library only, like egress.py, which it is imported beside.
"""

from __future__ import annotations

import os

try:
    from scheduling.backends.session import egress
except ImportError:  # imported by path, from the folder it shares with egress.py
    import egress  # type: ignore[no-redef]

API_PREFIX = "/api/v1/sandboxes/"
HEAD_LIMIT = 16384  # bytes of a request's line and headers


def start(
    socket_path: str,
    web: str,
    *,
    run_as: list[int] | tuple[int, int] | None = None,
) -> tuple[int, int]:
    """A relay from a Unix socket (bound into a batch agent task's sandbox) to the portal's web
    address `web` ("host:port", plain HTTP) for requests to the sandbox API only. Returns the
    handle `egress.stop()` takes."""
    host, _, port = web.rpartition(":")
    if not host or not port.isdigit():
        raise egress.EgressError(
            f"api relay: expected the portal's web address as host:port, got {web!r}"
        )
    if (not run_as and os.geteuid() == 0) or (run_as and int(run_as[0]) == 0):
        raise egress.EgressError(egress.NEVER_ROOT)
    listener = egress.listen_unix(socket_path, run_as)
    try:
        handle, why = egress.spawn_keeper(listener, None, run_as, _api_keeper, (host, int(port)))
    finally:
        listener.close()
    if handle is None:
        raise egress.EgressError(f"api relay: did not start: {why}")
    return handle


def _api_keeper(listener, log, ready_w, exit_r, host, port) -> None:
    """In the API relay's keeper: say it is ready, then serve until told to end."""
    os.write(ready_w, b"ok")
    os.close(ready_w)
    egress.serve(listener, exit_r, None, lambda: False, lambda conn: _api_request(conn, host, port))


# Headers the client's request loses on the way: hop-by-hop ones, and those that would let
# it speak for the relay (where it comes from) or choose the portal's host.
DROPPED = (
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "host",
    "forwarded",
    "x-real-ip",
)
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
TOKEN = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
PATH_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~/%")


def api_head(head: bytes, web: str) -> tuple[bytes, int]:
    """The head to send the portal for a client's request head (its line and headers, without
    the blank line), and how many body bytes follow; ValueError with the reason if the request
    is not one to pass on: not the sandbox API (API_PREFIX), a path that could lead elsewhere
    once normalised (`..`, an encoded `.`, `/`, `\\` or `%`), a chunked or ambiguous body."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("the request head is not ASCII") from None
    line, *fields = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or parts[0] not in METHODS or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise ValueError("expected a request line METHOD /api/v1/sandboxes/... HTTP/1.1")
    method, target, version = parts
    path, _, query = target.partition("?")
    segments = path.split("/")
    lowered = path.lower()
    if (
        not path.startswith(API_PREFIX)
        or any(c not in PATH_CHARS for c in path)
        or any(s in (".", "..") for s in segments)
        or any(bad in lowered for bad in ("%2e", "%2f", "%5c", "%25", "//"))
        or any(not (0x21 <= ord(c) < 0x7F) for c in query)
    ):
        raise ValueError(f"only the sandbox API ({API_PREFIX}...) is reachable from here")
    kept = []
    length = None
    for field in fields:
        name, colon, value = field.partition(":")
        if not colon or not name or any(c not in TOKEN for c in name):
            raise ValueError(f"a header line is not valid: {field[:80]!r}")
        key, value = name.lower(), value.strip()
        if key == "transfer-encoding":
            raise ValueError("a chunked body is not passed on: send Content-Length")
        if key == "content-length":
            if length is not None or not value.isdigit():
                raise ValueError("expected one Content-Length of digits")
            length = int(value)
        if key in DROPPED or key.startswith("x-forwarded-"):
            continue
        kept.append(f"{name}: {value}")
    out = [f"{method} {target} {version}", f"Host: {web}", *kept, "Connection: close", "", ""]
    return "\r\n".join(out).encode("ascii"), length or 0


def _api_request(conn, host: str, port: int) -> None:
    """One request of a batch task to the sandbox API: read its head (up to HEAD_LIMIT), pass it
    on as api_head() says with exactly its body, and the answer back; else a 403 from here."""
    import socket

    conn.settimeout(30)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(egress.CHUNK)
        if not chunk:
            return
        data += chunk
        if len(data) > HEAD_LIMIT and b"\r\n\r\n" not in data[: HEAD_LIMIT + 4]:
            return _refuse(conn, 431, "the request head is larger than the relay takes")
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > HEAD_LIMIT:
        return _refuse(conn, 431, "the request head is larger than the relay takes")
    try:
        upstream_head, length = api_head(head, f"{host}:{port}")
    except ValueError as exc:
        return _refuse(conn, 403, str(exc))
    body = rest[:length]
    conn.settimeout(None)
    upstream = socket.create_connection((host, port), timeout=10)
    upstream.settimeout(None)
    egress.splice(conn, upstream, upstream_head + body, length - len(body))


def _refuse(conn, status: int, reason: str) -> None:
    body = f"switchyard sandbox-api relay: {reason}\n".encode()
    words = {403: "Forbidden", 431: "Request Header Fields Too Large"}[status]
    conn.sendall(
        f"HTTP/1.1 {status} {words}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
