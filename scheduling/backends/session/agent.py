"""The agent inside a live sandbox (docs/sandboxes.md): it runs the session's commands.

Started by the trusted side as the sandbox's only command, as the job's account and inside
its bubblewrap namespaces:

    python3 -I -S /run/switchyard/agent.py --listen-fd N --idle S [--egress-socket PATH]

It accepts on the listening Unix socket it inherits as fd N (bound by the trusted side at a
path only the portal reaches) and serves one request per connection, each message a 4-byte
big-endian length then UTF-8 JSON:

    {"op": "exec", "argv": [...], "stdin": b64, "env": {...}, "cwd": ..., "timeout": s,
     "max_output": n, "stream": bool}
        -> zero or more {"out": "stdout"|"stderr", "data": b64} when streamed, then
           {"exit_code", "stdout", "stderr", "duration_ms", "timed_out", "truncated"}
    {"op": "put", "path": ..., "data": b64, "mode": n}   -> {"ok": true, "size": n}
    {"op": "get", "path": ..., "limit": n}               -> {"data": b64, "size": n}
    {"op": "ping", "idle": s (optional)}                 -> {"ok": true, "pid": n}
    anything refused                                     -> {"error": "..."}

Relative paths and cwd resolve in the session's home (/home/sandbox). A command's own
children that it leaves running (`sh -c 'x &'`) go on between execs: the agent waits for the
command itself, not for its pipes. It ends itself after `--idle` + 30 seconds without a
request (a ping's `idle` sets it anew: a warm sandbox learns its session's when it is
handed out), a backstop behind the portal's own idle reclaim; its end ends the sandbox (bubblewrap
tears the pid namespace down with it).

Standard library only: it runs under whatever python3 the sandbox's system or image has, with
`-I -S` so that nothing in the sandbox's environment or site-packages changes it.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

HOME = "/home/sandbox"
IDLE_GRACE_S = 30.0
# The largest request accepted: a put's data is bounded by the sandbox's own tmpfs anyway.
MAX_REQUEST = 96 << 20
MAX_ARGV = 4096
READ_CHUNK = 1 << 16
EGRESS_PORT = 3128
_HEADER = struct.Struct(">I")


class Refused(Exception):
    """A request the agent will not serve; its text is the reply's `error`."""


class Activity:
    """When the last request came or went, and how many are being served now."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.last = time.monotonic()
        self.busy = 0
        self.idle_s = 0.0

    def begin(self) -> None:
        with self.lock:
            self.busy += 1
            self.last = time.monotonic()

    def end(self) -> None:
        with self.lock:
            self.busy -= 1
            self.last = time.monotonic()

    def idle_for(self) -> float:
        with self.lock:
            return 0.0 if self.busy else time.monotonic() - self.last


def send(conn: socket.socket, message: dict) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    conn.sendall(_HEADER.pack(len(body)) + body)


def recv_exact(conn: socket.socket, size: int) -> bytes:
    parts = []
    while size:
        chunk = conn.recv(min(size, 1 << 20))
        if not chunk:
            raise Refused("the request ended early")
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)


def read_request(conn: socket.socket) -> dict:
    (size,) = _HEADER.unpack(recv_exact(conn, _HEADER.size))
    if size > MAX_REQUEST:
        raise Refused(f"request of {size} bytes; at most {MAX_REQUEST}")
    try:
        request = json.loads(recv_exact(conn, size))
    except ValueError as exc:
        raise Refused(f"request is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise Refused("request must be a JSON object")
    return request


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(value: object, name: str) -> bytes:
    if not isinstance(value, str):
        raise Refused(f"{name}: expected base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise Refused(f"{name}: not valid base64") from None


def resolve(path: object, name: str) -> str:
    if not isinstance(path, str) or not path or "\0" in path:
        raise Refused(f"{name}: expected a non-empty path")
    return os.path.normpath(os.path.join(HOME, path))


def number(request: dict, name: str, default: float, low: float, high: float) -> float:
    value = request.get(name, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise Refused(f"{name}: expected a number from {low} to {high}, got {value!r}")
    return value


class Capture:
    """One stream of a command: kept up to the cap, the rest read and dropped."""

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.cap = cap
        self.parts: list[bytes] = []
        self.kept = 0
        self.cut = False

    def add(self, chunk: bytes) -> bytes:
        room = self.cap - self.kept
        if len(chunk) > room:
            chunk, self.cut = chunk[: max(room, 0)], True
        if chunk:
            self.parts.append(chunk)
            self.kept += len(chunk)
        return chunk


def run_exec(conn: socket.socket, request: dict) -> dict:
    argv = request.get("argv")
    if (
        not isinstance(argv, list)
        or not argv
        or len(argv) > MAX_ARGV
        or not all(isinstance(a, str) and "\0" not in a for a in argv)
    ):
        raise Refused("argv: expected a non-empty list of strings")
    env = dict(os.environ)
    extra = request.get("env") or {}
    if not isinstance(extra, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and k and "=" not in k and "\0" not in k + v
        for k, v in extra.items()
    ):
        raise Refused("env: expected an object of names to strings")
    env.update(extra)
    cwd = resolve(request.get("cwd") or ".", "cwd")
    stdin = unb64(request.get("stdin") or "", "stdin")
    timeout = number(request, "timeout", 60.0, 0.001, 7 * 86400)
    cap = int(number(request, "max_output", 1 << 20, 0, 1 << 30))
    stream = request.get("stream") is True
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        # The shell's own answers: 127 for a command not found, 126 for one not runnable.
        if exc.filename == cwd:
            raise Refused(f"cwd: {exc.strerror}: {request.get('cwd')}") from None
        missing = 127 if isinstance(exc, FileNotFoundError) else 126
        message = f"{argv[0]}: {exc.strerror}\n".encode()
        return result(missing, b"", message, started, False, False)
    outputs = {proc.stdout: Capture("stdout", cap), proc.stderr: Capture("stderr", cap)}
    timed_out = wait_streams(conn, proc, outputs, stdin, started + timeout, stream)
    out, err = outputs.values()
    code = None if timed_out else proc.returncode
    if code is not None and code < 0:
        code = 128 - code  # killed by a signal, as a shell reports it
    return result(
        code,
        b"".join(out.parts),
        b"".join(err.parts),
        started,
        timed_out,
        out.cut or err.cut,
    )


def result(code, stdout, stderr, started, timed_out, truncated) -> dict:
    return {
        "exit_code": code,
        "stdout": b64(stdout),
        "stderr": b64(stderr),
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
        "timed_out": timed_out,
        "truncated": truncated,
    }


def wait_streams(conn, proc, outputs, stdin, deadline, stream) -> bool:
    """Feed stdin and collect output until the command exits or its deadline passes (then
    its process group is killed). Returns whether it timed out."""
    exited = os.pidfd_open(proc.pid)
    sel = selectors.DefaultSelector()
    try:
        sel.register(exited, selectors.EVENT_READ, None)
        for pipe in outputs:
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, outputs[pipe])
        pending = memoryview(stdin)
        if stdin:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                kill_group(proc)
                proc.wait()
                finish_reading(conn, sel, stream)
                return True
            for key, _ in sel.select(left):
                if key.data is None:
                    proc.wait()
                    finish_reading(conn, sel, stream)
                    return False
                if key.data == "stdin":
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                else:
                    read_ready(conn, sel, key, stream)
    finally:
        sel.close()
        os.close(exited)
        if proc.stdin is not None and not proc.stdin.closed:
            proc.stdin.close()


def finish_reading(conn, sel, stream) -> None:
    """The command has exited: what it wrote is in its pipes already, so read them until
    empty without waiting. A child it left running may still hold a pipe: that pipe is read
    and dropped in the background until that child closes it, so its writes do not fail."""
    for key in list(sel.get_map().values()):
        if key.data is None or key.data == "stdin":
            continue
        while key.fileobj in sel.get_map() and read_ready(conn, sel, key, stream):
            pass
    held = [key.fileobj for key in sel.get_map().values() if isinstance(key.data, Capture)]
    for pipe in held:
        sel.unregister(pipe)
        os.set_blocking(pipe.fileno(), True)
        threading.Thread(target=discard, args=(pipe,), daemon=True).start()


def discard(pipe) -> None:
    with pipe:
        while pipe.read1(READ_CHUNK):
            pass


def read_ready(conn, sel, key, stream) -> bool:
    """Read what one pipe holds now; False once it is empty for now or at its end."""
    try:
        chunk = os.read(key.fd, READ_CHUNK)
    except BlockingIOError:
        return False
    if not chunk:
        sel.unregister(key.fileobj)
        key.fileobj.close()
        return False
    kept = key.data.add(chunk)
    if stream and kept:
        send(conn, {"out": key.data.name, "data": b64(kept)})
    return True


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_put(request: dict) -> dict:
    path = resolve(request.get("path"), "path")
    data = unb64(request.get("data") or "", "data")
    mode = request.get("mode", 0o644)
    if isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
        raise Refused(f"mode: expected a file mode from 0 to 0o7777, got {mode!r}")
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except OSError as exc:
        raise Refused(f"path: {exc.strerror}: {request.get('path')}") from None
    return {"ok": True, "size": len(data)}


def run_get(request: dict) -> dict:
    path = resolve(request.get("path"), "path")
    limit = int(number(request, "limit", 1 << 20, 0, MAX_REQUEST))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            if not os.path.isfile(f"/proc/self/fd/{fd}"):
                raise Refused(f"path: not a regular file: {request.get('path')}")
            parts, size = [], 0
            while size <= limit:
                chunk = os.read(fd, min(READ_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                parts.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
    except OSError as exc:
        raise Refused(f"path: {exc.strerror}: {request.get('path')}") from None
    if size > limit:
        raise Refused(f"path: larger than the limit of {limit} bytes: {request.get('path')}")
    return {"data": b64(b"".join(parts)), "size": size}


def serve_one(conn: socket.socket, activity: Activity) -> None:
    activity.begin()
    try:
        with conn:
            try:
                request = read_request(conn)
                op = request.get("op")
                if op == "exec":
                    reply = run_exec(conn, request)
                elif op == "put":
                    reply = run_put(request)
                elif op == "get":
                    reply = run_get(request)
                elif op == "ping":
                    if request.get("idle") is not None:
                        activity.idle_s = number(request, "idle", 0, 0, 366 * 86400)
                    reply = {"ok": True, "pid": os.getpid()}
                else:
                    raise Refused(f"op: expected exec, put, get or ping, got {op!r}")
            except Refused as exc:
                reply = {"error": str(exc)}
            send(conn, reply)
    except (OSError, struct.error):
        pass  # the portal hung up; nothing to answer
    finally:
        activity.end()


def start_egress(socket_path: str) -> None:
    """The sandbox's one way out: a forwarder on 127.0.0.1:EGRESS_PORT to the session's proxy
    through the Unix socket bound in at `socket_path` (session/forward.py, loaded from beside
    this file only when the session has egress: `-I` keeps this folder off sys.path)."""
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("forward", os.path.join(here, "forward.py"))
    if spec is None or spec.loader is None:
        raise SystemExit(f"agent: no forward.py beside {here}")
    forward = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(forward)
    forward.start(socket_path, port=EGRESS_PORT)  # serves in its own daemon thread
    proxy = f"http://127.0.0.1:{EGRESS_PORT}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        os.environ[name] = proxy


USAGE = "usage: agent.py --listen-fd N --idle SECONDS [--egress-socket PATH]"


def parse_args(argv: list[str]) -> tuple[int, float, str | None]:
    """The command line, without argparse (its import is a sixth of the agent's start)."""
    options: dict[str, str] = {}
    at = 0
    while at < len(argv):
        name, sep, value = argv[at].partition("=")
        if name not in ("--listen-fd", "--idle", "--egress-socket") or name in options:
            raise SystemExit(f"agent: unexpected argument {argv[at]!r}\n{USAGE}")
        if not sep:
            at += 1
            if at == len(argv):
                raise SystemExit(f"agent: {name} needs a value\n{USAGE}")
            value = argv[at]
        options[name] = value
        at += 1
    try:
        return int(options["--listen-fd"]), float(options["--idle"]), options.get("--egress-socket")
    except (KeyError, ValueError):
        raise SystemExit(USAGE) from None


def main(argv: list[str] | None = None) -> int:
    listen_fd, idle, egress_socket = parse_args(sys.argv[1:] if argv is None else argv)
    listener = socket.socket(fileno=listen_fd)
    os.set_inheritable(listener.fileno(), False)
    if egress_socket:
        start_egress(egress_socket)
    os.environ.setdefault("HOME", HOME)
    with contextlib.suppress(OSError):
        os.chdir(HOME)
    activity = Activity()
    activity.idle_s = idle
    listener.settimeout(min(max(idle + IDLE_GRACE_S, 0.1), 5.0))
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            backstop = activity.idle_s + IDLE_GRACE_S
            if activity.idle_for() >= backstop:
                print(f"agent: no request for {backstop:.0f} s; ending", file=sys.stderr)
                return 0
            continue
        conn.settimeout(None)
        threading.Thread(target=serve_one, args=(conn, activity), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
