"""The portal's side of the agent's socket (session/wire.py) against an agent that the
sandbox's own commands replaced: what it streams is bounded by the caller's cap, whatever it
sends, so a web worker's memory does not grow with it."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import struct
import threading

import pytest

from scheduling.backends.base import BackendError, ExecRequest
from scheduling.backends.session import box, wire


def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def serve_once(path: str, answer) -> socket.socket:
    """A fake agent at `path`: takes one request, then `answer(conn)`."""
    server = box.listen(path)

    def run() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(65536)
            with contextlib.suppress(OSError):  # the portal hung up, as it should
                answer(conn)

    threading.Thread(target=run, daemon=True).start()
    return server


def test_a_stream_past_the_cap_is_refused_and_what_reached_the_caller_is_within_it(tmp_path):
    chunk = base64.b64encode(b"x" * 1000).decode()

    def endless(conn: socket.socket) -> None:
        while True:
            conn.sendall(frame({"out": "stdout", "data": chunk}))

    path = str(tmp_path / "endless.sock")
    server = serve_once(path, endless)
    got = []
    with pytest.raises(BackendError, match="over its cap of 10000"):
        wire.exec_in(
            path,
            ExecRequest(argv=("yes",), max_output=10_000, timeout_s=5),
            on_output=lambda name, data: got.append(data),
        )
    assert sum(len(data) for data in got) <= 10_000
    server.close()


def test_output_streamed_to_an_exec_that_did_not_ask_for_it_is_refused(tmp_path):
    def unasked(conn: socket.socket) -> None:
        conn.sendall(frame({"out": "stdout", "data": "eA=="}) * 1000)

    path = str(tmp_path / "unasked.sock")
    server = serve_once(path, unasked)
    with pytest.raises(BackendError, match="not asked for"):
        wire.exec_in(path, ExecRequest(argv=("true",), timeout_s=5))
    server.close()


def test_json_nested_past_the_parsers_depth_is_a_backend_error_not_a_crash(tmp_path):
    deep = b"[" * 200_000

    def nested(conn: socket.socket) -> None:
        conn.sendall(struct.pack(">I", len(deep)) + deep)

    path = str(tmp_path / "deep.sock")
    server = serve_once(path, nested)
    with pytest.raises(BackendError, match="not JSON"):
        wire.exec_in(path, ExecRequest(argv=("true",), timeout_s=5))
    server.close()
