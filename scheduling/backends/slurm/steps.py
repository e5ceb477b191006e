"""What `srun` and MPI need inside a Slurm job's sandbox (docs/slurm.md, docs/security.md).

A multi-node job runs its batch script on the first of its nodes; its command reaches the
others through `srun` (or `mpirun`, which calls srun): srun asks slurmctld for a step, and each
node's slurmd starts the step's tasks and connects back to srun for their output and their
end. From inside the sandbox that needs

- the cluster's configuration, read-only: `SLURM_CONF` and its folder (`/etc` is in every
  sandbox already, so a site whose configuration lives there needs nothing more);
- munge's socket, to sign srun's requests as the job's own account: its folder read-only
  (connecting to a socket needs no write access to the folder; the job cannot replace it);
- the `SLURM_*` variables slurmd gave the batch script: the sandbox keeps the environment it
  is started with, and `SLURM_EXPORT_ENV=ALL` (set by the script) hands it on to the steps,
  with a `PATH` (`--export=NONE` gives the script none);
- the node's network: srun listens for the nodes' connections, which cannot reach it
  through slirp4netns's address translation, and the controller and the nodes' daemons are
  on the control-plane addresses a batch job's network keeps out of reach. So where the site
  says its compute network cannot reach the portal's own services (its database, broker, web
  server: a firewall between them), `SWITCHYARD_SLURM_MULTINODE_HOST_NETWORK=1`, a job that
  asks for more than one node shares its node's network namespace. Off by default: then every
  job keeps the network of its own, which cannot reach the control plane, and a multi-node
  job's srun cannot reach the other nodes (its command runs on its first node). One-node
  jobs always keep the network of their own.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from scheduling.backends.base import SubmitRequest
from scheduling.spec import SANDBOXED_TYPES

# Where Debian's munged listens when slurm.conf does not say (AuthInfo=socket=...).
MUNGE_SOCKET = "/run/munge/munge.socket.2"
STEP_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True, slots=True)
class StepAccess:
    """What a job's sandbox gets so that srun works in it."""

    readonly: list[str] = field(default_factory=list)  # bound read-only at the same path
    lines: list[str] = field(default_factory=list)  # batch script lines, before the sandbox
    host_network: bool = False  # share the node's network namespace (multi-node jobs)


def step_access(
    request: SubmitRequest, slurm_conf: str | None, *, host_network: bool = False
) -> StepAccess:
    """The configuration and munge's socket for every job (a one-node job may run `srun`
    too, on its own node); the node's network for a multi-node batch job where the site
    allows it (`host_network`)."""
    readonly: list[str] = []
    # --export=NONE leaves the script no PATH (bash searches a default of its own, but does
    # not export it): a step's tasks would find no program (`srun hostname`). The
    # descriptor's own PATH, exported before, is kept.
    lines = [f'export PATH="${{PATH:-{STEP_PATH}}}"']
    if slurm_conf and os.path.isdir(os.path.dirname(slurm_conf)):
        readonly.append(os.path.dirname(slurm_conf))
        lines.append(f"export SLURM_CONF={shlex.quote(slurm_conf)}")
    folder = os.path.dirname(munge_socket(slurm_conf))
    if os.path.isdir(folder) and folder not in readonly and not _under_etc(folder):
        readonly.append(folder)
    nodes = request.spec.resources.nodes or 1
    return StepAccess(
        readonly=readonly,
        lines=lines,
        host_network=host_network and nodes > 1 and request.type not in SANDBOXED_TYPES,
    )


def munge_socket(slurm_conf: str | None) -> str:
    """The socket slurm.conf names (`AuthInfo=socket=PATH`), else munge's default."""
    try:
        with open(slurm_conf or "", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return MUNGE_SOCKET
    for line in text.splitlines():
        name, _, value = line.partition("=")
        if name.strip().lower() != "authinfo":
            continue
        for option in value.split(","):
            key, _, path = option.strip().partition("=")
            if key == "socket" and path.startswith("/"):
                return path
    return MUNGE_SOCKET


def _under_etc(path: str) -> bool:
    return path == "/etc" or path.startswith("/etc/")
