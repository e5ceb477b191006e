"""The bubblewrap sandbox every job runs in, on the local backend and inside Slurm's scripts.

What a job can see and do is in docs/security.md. In short: bubblewrap is started by the
job's own unprivileged account (never by root), so the sandbox has no capabilities and the
kernel refuses it every mount; new user, pid, ipc, uts, cgroup and network namespaces; the
system read-only with password hashes masked; a private /tmp and /dev/shm, each no bigger than
the job's memory request (tmpfs is memory); the job's own folders and nothing else of the
machine (no portal code, database, broker or other jobs). Every other tmpfs of the sandbox
(its root, /dev, the one that hides other jobs' folders) is made read-only once set up, so
/tmp and /dev/shm are the only memory a job can fill with files: the local backend's watchdog
counts them with its processes' memory (`TMPFS`, jobwatch.py).

The network namespace is the job's own on every type, and never the host's. Agent and sandbox
tasks keep it empty (a loopback of their own only). A batch job's runner connects it to the
outside through slirp4netns before the job runs (jobnet.py), with every address of
`blocked_networks()` (the control plane's) and of the node itself unreachable.

Inside, `prlimit` sets the job's process limit after bubblewrap has made the new user
namespace: Linux counts RLIMIT_NPROC per user and user namespace, so the limit holds per job
even when many jobs run as one account.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from django.conf import settings

from scheduling.backends import jobnet
from scheduling.backends.base import BackendError
from scheduling.spec import SANDBOXED_TYPES

# Files of /etc that hold password hashes: masked even though the job's account could not
# read them anyway.
MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")

# The read-only system a sandboxed job sees.
SYSTEM_BINDS = (
    "--ro-bind",
    "/usr",
    "/usr",
    "--ro-bind-try",
    "/bin",
    "/bin",
    "--ro-bind-try",
    "/sbin",
    "/sbin",
    "--ro-bind-try",
    "/lib",
    "/lib",
    "--ro-bind-try",
    "/lib64",
    "/lib64",
    "--ro-bind",
    "/etc",
    "/etc",
    *(arg for path in MASKED for arg in ("--ro-bind-try", "/dev/null", path)),
)

PRLIMIT = "/usr/bin/prlimit"

# The tmpfs mounts a job can write, inside the sandbox: each sized by `tmp_bytes`.
TMPFS = ("/tmp", "/dev/shm")


def sandbox_argv(
    bwrap: str,
    *,
    writable: Sequence[str],
    readonly: Sequence[str] = (),
    mounts: Sequence[tuple[str, bool]] = (),
    hide: str,
    chdir: str,
    tmp_bytes: int | None = None,
    max_processes: int | None = None,
    max_file_bytes: int | None = None,
    prlimit: str = PRLIMIT,
    devices: Sequence[str] = (),
    share_net: bool = False,
    system: Sequence[str] | None = None,
    runner: Sequence[str] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The argv prefix that runs a command in the sandbox (append the command's argv to it).

    `hide` is covered by an empty tmpfs (where job folders live: other jobs' are not this
    job's to read), then this job's own folders are brought back: `writable` and `readonly`.
    `mounts` are (path, read-only) of the storage folders it sees (docs/storage.md), bound
    after its own, parents first.
    The job has a network namespace of its own, empty until its runner connects it; with
    `share_net` the node's (a multi-node Slurm job's, for srun: slurm/steps.py).
    `tmp_bytes` bounds each writable tmpfs (`TMPFS`: it is memory); `max_processes` and
    `max_file_bytes` become the job's RLIMIT_NPROC and RLIMIT_FSIZE, set inside the new user
    namespace. `devices` are bubblewrap's arguments that bind the job's device files into its
    private /dev (devices.py): its GPUs' and nothing else of the machine's.
    `system` replaces the host's read-only system (SYSTEM_BINDS) with an image's, and
    `runner` what sets the limits inside it (local/images.py).
    `extra` are bubblewrap's arguments for more mounts, made after the job's own folders and
    before the sandbox's root is made read-only (a live sandbox's home and agent:
    session/box.py).
    """
    binds: list[str] = []
    for path in writable:
        binds += ["--bind", path, path]
    for path in readonly:
        binds += ["--ro-bind", path, path]
    for path, read_only in mounts:
        binds += ["--ro-bind" if read_only else "--bind", path, path]
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
        *(["--share-net"] if share_net else []),
        "--unshare-user",  # required (not just tried), for:
        "--disable-userns",  # no further user namespaces inside
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
        # Only the system, read-only: the portal's code, settings, database and other users'
        # files (/work, /root, /home, /var, /srv) are not there at all.
        *(SYSTEM_BINDS if system is None else system),
        "--dev",
        "/dev",
        *devices,
        "--proc",
        "/proc",
        *tmp,
        *size,
        "--tmpfs",
        hide,
        *binds,
        *extra,
        # Last, once every mount point is made (a mount after these could not make its
        # own): the tmpfs under them read-only, not recursively (/tmp, /dev/shm, /dev/null
        # and the job's folders stay as they are).
        "--remount-ro",
        hide,
        "--remount-ro",
        "/dev",
        "--remount-ro",
        "/",
        "--chdir",
        chdir,
        "--",
        *([prlimit, *limits, "--"] if runner is None else runner),
    ]


class BlockedNetworksError(BackendError):
    """A control-plane host could not be resolved: no batch job starts without it blocked."""


def job_network(task_type: str) -> list[str] | None:
    """The networks a job of this type must not reach once its runner connects its network
    (batch types), or None: it gets no network (agent and sandbox tasks). Both backends ask
    here, and pass the answer on as data (a launch plan, a batch script)."""
    return None if task_type in SANDBOXED_TYPES else blocked_networks()


def blocked_networks() -> list[str]:
    """What no job's network may reach, as IPv4/IPv6 networks (CIDR): the hosts of every
    database and of the broker and cache (resolved), this machine's own addresses (the web
    server, the launcher) and `SWITCHYARD_JOB_BLOCKED_NETWORKS`. The node a job runs on adds
    its own addresses when it connects the job (jobnet.connect)."""
    hosts: list[str] = []
    for database in settings.DATABASES.values():
        host: str | None = database.get("HOST") or ""
        if host and not host.startswith("/"):  # a path is a Unix socket
            hosts.append(host)
    urls = [settings.REDIS_URL or "", getattr(settings, "CELERY_BROKER_URL", "") or ""]
    for url in (part for value in urls for part in value.split(";")):
        try:
            host = urlsplit(url.strip()).hostname
        except ValueError:
            host = None
        if host:
            hosts.append(host)
    networks = list(settings.SWITCHYARD_JOB_BLOCKED_NETWORKS)
    for host in dict.fromkeys(hosts):
        networks += [f"{address}/{128 if ':' in address else 32}" for address in _resolve(host)]
    networks += [f"{address}/32" for address in jobnet.host_addresses()]
    return list(dict.fromkeys(networks))


_RESOLVED: dict[str, tuple[float, list[str]]] = {}
RESOLVE_TTL_S = 60.0


def _resolve(host: str) -> list[str]:
    """The addresses of `host`, asked again after RESOLVE_TTL_S; the last answer while the
    resolver fails; BlockedNetworksError if there never was one."""
    now = time.monotonic()
    cached = _RESOLVED.get(host)
    if cached and now - cached[0] < RESOLVE_TTL_S:
        return cached[1]
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError) as exc:
        if cached:
            return cached[1]
        raise BlockedNetworksError(
            f"the control plane's host {host!r} could not be resolved ({exc}): a batch job "
            "does not start before its network can be kept from it"
        ) from None
    addresses = list(dict.fromkeys(str(info[4][0]).split("%")[0] for info in infos))
    _RESOLVED[host] = (now, addresses)
    return addresses
