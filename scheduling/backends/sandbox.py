"""The bubblewrap sandbox jobs run in, on the local backend and inside Slurm's batch scripts.

See docs/security.md for what a job can see and do.
"""

from __future__ import annotations

from collections.abc import Sequence

# The read-only system a sandboxed job sees. Password hashes are masked even from root.
SANDBOX_SYSTEM_BINDS = (
    "--ro-bind", "/usr", "/usr",
    "--ro-bind-try", "/bin", "/bin",
    "--ro-bind-try", "/sbin", "/sbin",
    "--ro-bind-try", "/lib", "/lib",
    "--ro-bind-try", "/lib64", "/lib64",
    "--ro-bind", "/etc", "/etc",
    "--ro-bind-try", "/dev/null", "/etc/shadow",
    "--ro-bind-try", "/dev/null", "/etc/gshadow",
)  # fmt: skip


def sandbox_argv(
    bwrap: str, *, writable: Sequence[str], readonly: Sequence[str] = (), hide: str, chdir: str
) -> list[str]:
    """The bubblewrap prefix for a sandboxed command (append the command's argv to it).

    New namespaces (so no network: only a loopback that is down), only the read-only system,
    a private /tmp, `hide` covered by an empty tmpfs (other jobs' folders are not this job's
    to read), and then this job's own folders brought back.
    """
    binds: list[str] = []
    for path in writable:
        binds += ["--bind", path, path]
    for path in readonly:
        binds += ["--ro-bind", path, path]
    return [
        bwrap,
        "--unshare-all",  # new user/ipc/pid/net/uts/cgroup namespaces: no network
        "--die-with-parent",
        "--new-session",
        # Only the system, read-only: the portal's code, settings, database and other users'
        # files (/work, /root, /home, /var, /srv) are not there at all.
        *SANDBOX_SYSTEM_BINDS,
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        "--tmpfs", hide,
        *binds,
        "--chdir", chdir,
        "--",
    ]  # fmt: skip
