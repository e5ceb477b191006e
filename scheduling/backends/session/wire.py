"""The portal's side of a live sandbox's agent (docs/sandboxes.md): one request per connection
to the session's Unix socket, its replies read as hostile.

Every reply is bounded (a frame larger than the request can need is refused before it is
read), every call has a deadline, and anything malformed (a short frame, JSON that is not an
object, base64 that does not decode, a field of the wrong type) is a BackendError, never a
crash or a hang. A socket that is gone or refuses the connection is SessionGone: the session
has ended. The agent's own refusals ({"error": …}) are AgentRefused, their text the agent's.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

from scheduling.backends.base import BackendError, ExecRequest, ExecResult, SessionGone

_HEADER = struct.Struct(">I")
# Room for the JSON around the data of a reply (field names, numbers, a message).
ENVELOPE = 64 << 10
# A streamed chunk is what the agent reads from a pipe at once, base64-encoded.
MAX_CHUNK_FRAME = ENVELOPE + (1 << 17)
# Past the command's own timeout, how long its reply may take (start, kill, drain, send).
EXEC_MARGIN_S = 10.0
FILE_DEADLINE_S = 60.0
# A Unix socket address holds at most 107 bytes; a longer path is reached through its folder.
_SUN_PATH_MAX = 100


class AgentRefused(BackendError):
    """The agent refused the request (a bad path, a missing file, a bad field); the text is
    the agent's, safe to show to the sandbox's owner."""


def b64_size(raw: int) -> int:
    return (raw + 2) // 3 * 4


@contextlib.contextmanager
def connect(path: str, deadline: float) -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    folder_fd = None
    try:
        address = path
        if len(os.fsencode(path)) > _SUN_PATH_MAX:
            try:
                folder_fd = os.open(os.path.dirname(path), os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                raise SessionGone(f"the sandbox's socket is gone: {path}") from None
            address = f"/proc/self/fd/{folder_fd}/{os.path.basename(path)}"
        sock.settimeout(_left(deadline))
        try:
            sock.connect(address)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
            raise SessionGone(f"the sandbox is not listening: {path}") from None
        except OSError as exc:
            raise BackendError(f"cannot reach the sandbox at {path}: {exc}") from None
        finally:
            if folder_fd is not None:
                os.close(folder_fd)
        yield sock
    finally:
        sock.close()


# How a request reaches the agent: `via(address, deadline)` gives a connected socket. Here a
# Unix socket's path (`connect`); on Slurm a relay run in the job (slurm/session.py).
Via = Callable[[str, float], contextlib.AbstractContextManager[socket.socket]]


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise BackendError("the sandbox did not answer in time")
    return left


def _recv_exact(sock: socket.socket, size: int, deadline: float) -> bytes:
    parts = []
    while size:
        sock.settimeout(_left(deadline))
        try:
            chunk = sock.recv(min(size, 1 << 20))
        except TimeoutError:
            raise BackendError("the sandbox did not answer in time") from None
        except OSError as exc:
            raise BackendError(f"the sandbox's connection failed: {exc}") from None
        if not chunk:
            raise BackendError("the sandbox closed the connection before its answer")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def read_frame(sock: socket.socket, deadline: float, max_frame: int) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > max_frame:
        raise BackendError(f"the sandbox's answer is {size} bytes; at most {max_frame} expected")
    try:
        message = json.loads(_recv_exact(sock, size, deadline))
    except (ValueError, UnicodeDecodeError, RecursionError):
        # RecursionError: arrays nested deeper than the parser goes (`[[[[…`), well within a
        # frame's cap; a crash of the caller otherwise.
        raise BackendError("the sandbox's answer is not JSON") from None
    if not isinstance(message, dict):
        raise BackendError("the sandbox's answer is not a JSON object")
    return message


def call(
    path: str,
    request: dict[str, Any],
    *,
    timeout_s: float,
    max_frame: int,
    on_frame: Callable[[dict[str, Any]], bool] | None = None,
    via: Via = connect,
) -> dict[str, Any]:
    """Send one request and return the final reply. While `on_frame(frame)` returns True the
    frame was an intermediate one (streamed output) and reading goes on; the first frame it
    does not take is the final reply."""
    deadline = time.monotonic() + timeout_s
    body = json.dumps(request, separators=(",", ":")).encode()
    with via(path, deadline) as sock:
        try:
            sock.settimeout(_left(deadline))
            sock.sendall(_HEADER.pack(len(body)) + body)
        except TimeoutError:
            raise BackendError("the sandbox did not take the request in time") from None
        except (BrokenPipeError, ConnectionResetError):
            raise SessionGone(f"the sandbox hung up: {path}") from None
        except OSError as exc:
            raise BackendError(f"cannot send to the sandbox: {exc}") from None
        while True:
            frame = read_frame(sock, deadline, max_frame)
            if "error" in frame:
                raise AgentRefused(_text(frame, "error")[:2000])
            if on_frame is None or not on_frame(frame):
                return frame


def _text(frame: dict[str, Any], name: str) -> str:
    value = frame.get(name)
    if not isinstance(value, str):
        raise BackendError(f"the sandbox's answer has no text {name!r}")
    return value


def _bytes(frame: dict[str, Any], name: str, cap: int) -> bytes:
    value = _text(frame, name)
    if len(value) > b64_size(cap):
        raise BackendError(f"the sandbox's {name} is over its cap of {cap} bytes")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BackendError(f"the sandbox's {name} is not base64") from None


def _flag(frame: dict[str, Any], name: str) -> bool:
    value = frame.get(name, False)
    if not isinstance(value, bool):
        raise BackendError(f"the sandbox's {name} is not true or false")
    return value


def exec_in(
    path: str,
    request: ExecRequest,
    *,
    on_output: Callable[[str, bytes], None] | None = None,
    via: Via = connect,
) -> ExecResult:
    """Run one command through the agent at `path`; streamed when `on_output` is given."""
    cap = request.max_output
    # What each stream has sent so far: an agent sends each at most up to the cap, so a
    # hostile one cannot stream without end into the caller (a web worker's memory).
    sent = {"stdout": 0, "stderr": 0}

    def streamed(frame: dict[str, Any]) -> bool:
        if "out" not in frame:
            return False
        name = frame["out"]
        if on_output is None:
            raise BackendError("the sandbox streamed output that was not asked for")
        if name not in ("stdout", "stderr"):
            raise BackendError("the sandbox streamed output that is neither stdout nor stderr")
        data = _bytes(frame, "data", cap)
        sent[name] += len(data)
        if sent[name] > cap:
            raise BackendError(f"the sandbox's {name} is over its cap of {cap} bytes")
        on_output(name, data)
        return True

    reply = call(
        path,
        {
            "op": "exec",
            "argv": list(request.argv),
            "stdin": base64.b64encode(request.stdin).decode("ascii"),
            "env": dict(request.env),
            "cwd": request.cwd,
            "timeout": request.timeout_s,
            "max_output": cap,
            "stream": on_output is not None,
        },
        timeout_s=request.timeout_s + EXEC_MARGIN_S,
        max_frame=ENVELOPE + 2 * b64_size(cap) + (MAX_CHUNK_FRAME if on_output else 0),
        on_frame=streamed,
        via=via,
    )
    code = reply.get("exit_code")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int)):
        raise BackendError("the sandbox's exit_code is not a number")
    duration = reply.get("duration_ms")
    if isinstance(duration, bool) or not isinstance(duration, int | float) or duration < 0:
        raise BackendError("the sandbox's duration_ms is not a number")
    return ExecResult(
        stdout=_bytes(reply, "stdout", cap),
        stderr=_bytes(reply, "stderr", cap),
        exit_code=code,
        duration_ms=float(duration),
        timed_out=_flag(reply, "timed_out"),
        truncated=_flag(reply, "truncated"),
    )


def put_file(path: str, file: str, data: bytes, *, mode: int = 0o644, via: Via = connect) -> None:
    request = {
        "op": "put",
        "path": file,
        "data": base64.b64encode(data).decode("ascii"),
        "mode": mode,
    }
    reply = call(path, request, timeout_s=FILE_DEADLINE_S, max_frame=ENVELOPE, via=via)
    if reply.get("ok") is not True or reply.get("size") != len(data):
        raise BackendError(f"the sandbox did not confirm writing {file}")


def get_file(path: str, file: str, *, limit: int, via: Via = connect) -> bytes:
    request = {"op": "get", "path": file, "limit": limit}
    reply = call(
        path, request, timeout_s=FILE_DEADLINE_S, max_frame=ENVELOPE + b64_size(limit), via=via
    )
    data = _bytes(reply, "data", limit)
    if reply.get("size") != len(data):
        raise BackendError(f"the sandbox's answer for {file} has the wrong size")
    return data


def ping(
    path: str, *, timeout_s: float = 5.0, idle_s: float | None = None, via: Via = connect
) -> int:
    """The agent's process id once it answers; SessionGone when nothing listens. `idle_s`
    sets the agent's idle backstop anew (a warm sandbox handed to a session)."""
    request: dict[str, Any] = {"op": "ping"}
    if idle_s is not None:
        request["idle"] = idle_s
    reply = call(path, request, timeout_s=timeout_s, max_frame=ENVELOPE, via=via)
    pid = reply.get("pid")
    if reply.get("ok") is not True or isinstance(pid, bool) or not isinstance(pid, int):
        raise BackendError("the sandbox's answer to a ping is not one")
    return pid
