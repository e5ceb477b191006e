"""What makes a sandbox a live session (docs/sandboxes.md), for whichever trusted side starts
it (the local supervisor, a Slurm job's watcher): the session's listening socket, the mounts
that add its home and its agent to the job's usual sandbox, and the agent's command line.

Standard library only and no project imports: the local supervisor imports it by path, and
only for a session.
"""

from __future__ import annotations

import contextlib
import os
import socket

# Where the sandbox sees its agent, its home (the working folder, a tmpfs of its own) and,
# with egress, the Unix socket to its proxy.
AGENT = "/run/switchyard/agent.py"
FORWARD = "/run/switchyard/forward.py"
HOME = "/home/sandbox"
EGRESS_SOCKET = "/run/switchyard/egress.sock"
# A batch task that uses live sandboxes (`sandboxes: true`): the socket of its relay to the
# sandbox API (session/apirelay.py), and where forward.py serves it inside (SWITCHYARD_URL).
API_SOCKET = "/run/switchyard/api.sock"
API_PORT = 7080
# The descriptor the agent finds its listening socket on (the supervisor dup2()s it there).
LISTEN_FD = 3
SOCKET_NAME = "session.sock"
# The name a socket is bound under until it listens (listen()).
PASSING_SUFFIX = ".new"
# A Unix socket address holds at most 107 bytes; a longer path is bound through its folder.
_SUN_PATH_MAX = 100
BACKLOG = 128


def listen(path: str) -> socket.socket:
    """Bind and listen on `path` (replacing a stale socket file), mode 0600: only the account
    that binds it (the portal's) may connect; the sandbox gets the listening descriptor. The
    socket is bound under a passing name and renamed to `path` once it listens, so a client
    that finds `path` is never refused for being early: a refusal means its agent has gone."""
    passing = path + PASSING_SUFFIX
    with contextlib.suppress(FileNotFoundError):
        os.unlink(passing)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    folder_fd = None
    try:
        address = passing
        if len(os.fsencode(passing)) > _SUN_PATH_MAX:
            folder_fd = os.open(os.path.dirname(passing), os.O_PATH | os.O_CLOEXEC)
            address = f"/proc/self/fd/{folder_fd}/{os.path.basename(passing)}"
        old = os.umask(0o177)
        try:
            sock.bind(address)
        finally:
            os.umask(old)
        os.chmod(passing, 0o600)
        sock.listen(BACKLOG)
        os.rename(passing, path)
    except BaseException:
        sock.close()
        with contextlib.suppress(OSError):
            os.unlink(passing)
        raise
    finally:
        if folder_fd is not None:
            os.close(folder_fd)
    return sock


def mounts(
    agent_file: str,
    *,
    home_bytes: int | None,
    forward_file: str | None = None,
    egress_socket: str | None = None,
) -> list[str]:
    """bubblewrap's arguments that add a session's home (a tmpfs of `home_bytes`: memory, as
    its /tmp is), its agent (read-only) and, with egress, the forwarder and the proxy's
    socket. `agent_file` and the others are host paths the job's account can read."""
    size = ["--size", str(home_bytes)] if home_bytes else []
    args = [*size, "--perms", "0700", "--tmpfs", HOME, "--ro-bind", agent_file, AGENT]
    if egress_socket is not None:
        if forward_file is None:
            raise ValueError("a session with egress needs forward.py bound in beside its agent")
        # Read-only: connecting needs no write to the mount, and the sandbox (which owns the
        # socket, as the job's account) cannot change its mode for others on the host.
        args += ["--ro-bind", forward_file, FORWARD, "--ro-bind", egress_socket, EGRESS_SOCKET]
    return args


def agent_argv(
    idle_s: float,
    *,
    egress: bool = False,
    python: str = "python3",
    listen_fd: int | str = LISTEN_FD,
) -> list[str]:
    """The sandbox's command: the agent, under the sandbox's own python3."""
    argv = [python, "-I", "-S", AGENT, "--listen-fd", str(listen_fd), "--idle", str(idle_s)]
    if egress:
        argv += ["--egress-socket", EGRESS_SOCKET]
    return argv
