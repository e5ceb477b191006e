"""Inside a live sandbox: the session's proxy at 127.0.0.1:3128, forwarded to the Unix socket
its trusted side bound in (docs/sandbox-network.md).

The sandbox's network namespace has only its own loopback; its one way out is the host's
tinyproxy for the session (egress.py), reached through the socket at
/run/switchyard/egress.sock. The agent (agent.py), given `--egress-socket`, loads this file
from beside itself and calls `start(socket_path, port=3128)`: a listener on 127.0.0.1 inside
the namespace, each connection spliced to a new connection of the socket, in daemon threads.
The session's commands get HTTP(S)_PROXY=http://127.0.0.1:3128. Nothing here decides what may
pass: the proxy does; this only carries bytes (no parsing of what the sandbox sends).

As a command, it runs another with forwarders around it (a batch task's sandbox, where no agent
runs):

    python3 -I -S forward.py --to PORT=SOCKET [--to PORT=SOCKET ...] -- COMMAND ARGS...

Standard library only: it runs under whatever python3 the sandbox's system or image has.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

PORT = 3128
CHUNK = 65536
MAX_CONNECTIONS = 64  # at once; past that a new connection is closed at once


def start(socket_path: str, *, port: int = PORT, host: str = "127.0.0.1") -> socket.socket:
    """Listen on host:port (raising OSError now if that cannot be done) and forward each
    connection to `socket_path` from a daemon thread. Returns the listening socket."""
    listener = socket.create_server((host, port), backlog=64)
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def one(conn: socket.socket) -> None:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
                upstream.connect(socket_path)
                splice(conn, upstream)
        except OSError:
            pass
        finally:
            conn.close()
            slots.release()

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # closed
            if not slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, name="egress-forward", daemon=True).start()
    return listener


def splice(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until both ends have finished; an end's EOF is passed on as a shutdown
    of the other's writing side (a request sent, then its answer read)."""

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(CHUNK):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    back = threading.Thread(target=pump, args=(b, a), daemon=True)
    back.start()
    pump(a, b)
    back.join()


def main(argv: list[str]) -> int:
    """`--to PORT=SOCKET ... -- COMMAND ...`: start the forwarders, run the command, exit with
    its status (128 + signal if a signal ended it)."""
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: forward.py --to PORT=SOCKET [--to ...] -- COMMAND ...", file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    if len(options) % 2 or any(flag != "--to" for flag in options[::2]):
        print(f"forward.py: expected --to PORT=SOCKET pairs, got {options}", file=sys.stderr)
        return 2
    for value in options[1::2]:
        port, _, path = value.partition("=")
        if not port.isdigit() or not path:
            print(f"forward.py: expected --to PORT=SOCKET, got {value!r}", file=sys.stderr)
            return 2
        start(path, port=int(port))
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(command[0], command)
        except OSError as exc:
            print(f"forward.py: {command[0]}: {exc}", file=sys.stderr)
        os._exit(127)
    status = os.waitpid(pid, 0)[1]
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
