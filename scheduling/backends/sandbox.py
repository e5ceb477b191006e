"""The bubblewrap sandbox every job runs in, on the local backend and inside Slurm's scripts.

What a job can see and do is in docs/security.md. In short: bubblewrap is started by the
job's own unprivileged account (never by root), so the sandbox has no capabilities and the
kernel refuses it every mount; new user, pid, ipc, uts and cgroup namespaces; the system
read-only with password hashes masked; a private /tmp and /dev/shm, each no bigger than the
job's memory request (tmpfs is memory); the job's own folders and nothing else of the machine
(no portal code, database, broker or other jobs). Every other tmpfs of the sandbox (its root,
/dev, the one that hides other jobs' folders) is made read-only once set up, so /tmp and
/dev/shm are the only memory a job can fill with files: the local backend's watchdog counts
them with its processes' memory (`TMPFS`, jobwatch.py). Agent and
sandbox tasks also get a network namespace of their own, with only a loopback that is down;
batch types keep the host's network.

Inside, `prlimit` sets the job's process limit after bubblewrap has made the new user
namespace: Linux counts RLIMIT_NPROC per user and user namespace, so the limit holds per job
even when many jobs run as one account.
"""

from __future__ import annotations

from collections.abc import Sequence

# Files of /etc that hold password hashes: masked even though the job's account could not
# read them anyway.
MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")

# The read-only system a sandboxed job sees.
SYSTEM_BINDS = (
    "--ro-bind", "/usr", "/usr",
    "--ro-bind-try", "/bin", "/bin",
    "--ro-bind-try", "/sbin", "/sbin",
    "--ro-bind-try", "/lib", "/lib",
    "--ro-bind-try", "/lib64", "/lib64",
    "--ro-bind", "/etc", "/etc",
    *(arg for path in MASKED for arg in ("--ro-bind-try", "/dev/null", path)),
)  # fmt: skip

PRLIMIT = "/usr/bin/prlimit"

# The tmpfs mounts a job can write, inside the sandbox: each sized by `tmp_bytes`.
TMPFS = ("/tmp", "/dev/shm")


def sandbox_argv(
    bwrap: str,
    *,
    writable: Sequence[str],
    readonly: Sequence[str] = (),
    hide: str,
    chdir: str,
    network: bool = False,
    tmp_bytes: int | None = None,
    max_processes: int | None = None,
    max_file_bytes: int | None = None,
    prlimit: str = PRLIMIT,
) -> list[str]:
    """The argv prefix that runs a command in the sandbox (append the command's argv to it).

    `hide` is covered by an empty tmpfs (where job folders live: other jobs' are not this
    job's to read), then this job's own folders are brought back: `writable` and `readonly`.
    `network` keeps the host's network (batch types); without it the job has none.
    `tmp_bytes` bounds each writable tmpfs (`TMPFS`: it is memory); `max_processes` and
    `max_file_bytes` become the job's RLIMIT_NPROC and RLIMIT_FSIZE, set inside the new user
    namespace.
    """
    binds: list[str] = []
    for path in writable:
        binds += ["--bind", path, path]
    for path in readonly:
        binds += ["--ro-bind", path, path]
    size = ["--size", str(tmp_bytes)] if tmp_bytes else []
    # bwrap's --dev makes /dev a tmpfs with shm an empty folder on it: a tmpfs of its own.
    tmp = [arg for path in TMPFS for arg in (*size, "--tmpfs", path)]
    limits = ["--core=0"]
    if max_processes:
        limits.append(f"--nproc={max_processes}")
    if max_file_bytes:
        limits.append(f"--fsize={max_file_bytes}")
    return [
        bwrap,
        "--unshare-all",  # new user/ipc/pid/net/uts/cgroup namespaces
        *(["--share-net"] if network else []),
        "--unshare-user",  # required (not just tried), for:
        "--disable-userns",  # no further user namespaces inside
        "--cap-drop", "ALL",
        "--die-with-parent",
        "--new-session",
        # Only the system, read-only: the portal's code, settings, database and other users'
        # files (/work, /root, /home, /var, /srv) are not there at all.
        *SYSTEM_BINDS,
        "--dev", "/dev",
        "--proc", "/proc",
        *tmp,
        *size, "--tmpfs", hide,
        *binds,
        # Last, once every mount point is made (a mount after these could not make its
        # own): the tmpfs under them read-only, not recursively (/tmp, /dev/shm, /dev/null
        # and the job's folders stay as they are).
        "--remount-ro", hide,
        "--remount-ro", "/dev",
        "--remount-ro", "/",
        "--chdir", chdir,
        "--",
        prlimit, *limits, "--",
    ]  # fmt: skip
