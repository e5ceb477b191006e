"""Slurm's configuration, written from Switchyard's own pools, nodes and queues.

Pure functions: plain values in (`NodeView`, `QueuePolicy` and the two small dataclasses
below), text out. No ORM, no I/O. `manage.py slurm_config` reads the database and writes the
files; `docker/slurm/cluster.sh` runs a localhost cluster from them, so the portal and Slurm
describe the same nodes and queues.

The mapping (docs/slurm.md):
- one partition per queue, named after it, over the nodes of the queue's pool;
- whole-node queues are `OverSubscribe=EXCLUSIVE`, queues with CPU oversubscription `1:N`
  are `OverSubscribe=FORCE:N`, the others `OverSubscribe=NO`;
- `MaxTime` is the queue's maximum walltime (`UNLIMITED` without one), `DefaultTime` its
  default walltime;
- `DefMemPerCPU` shares each node's memory between the jobs its CPUs can hold (with the
  oversubscription counted), so a job without `--mem` never takes a whole node's memory;
- a node's GPUs are `Gres=gpu:N`, each backed by a device file in gres.conf;
- nodes with a switch are described in topology.conf (leaf switches under one top switch);
- every node runs the portal's Prolog and Epilog, which pull a job's image into the node's
  cache before its batch script starts (`image_lines`, docs/containers.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduling.decisions.devices import DEFAULT_CONTROL_DEVICES, INDEX, NODE, fill
from scheduling.decisions.types import NodeView, QueuePolicy

# Names written into Slurm's files: no spaces, '=', '#', ',' or newlines can reach them.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")

WHOLE_NODE = "whole-node"


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """What the site's model does not say: where the cluster lives and how it is reached."""

    name: str = "switchyard"
    state_dir: str = "/var/tmp/switchyard-slurm"
    hostname: str = "localhost"  # NodeHostname and SlurmctldHost: this machine's short name
    address: str = "127.0.0.1"  # NodeAddr of every node, and the controller's address
    ctld_port: int = 16817
    dbd_port: int = 16819
    node_port_base: int = 17001  # node i (in name order) listens on node_port_base + i
    # Jobs must name an account (a project) Slurm knows: `sacctmgr add account/user`.
    enforce_associations: bool = True
    kill_wait_s: int = 5  # SIGTERM → SIGKILL at a time limit or a cancel
    # One image pull's timeout on a node (its unpack has as long again): the Prolog's.
    image_pull_timeout_s: int = 600

    @property
    def etc_dir(self) -> str:
        return f"{self.state_dir}/etc"

    @property
    def munge_socket(self) -> str:
        return f"{self.state_dir}/munge/munge.socket"

    @property
    def gpu_device_pattern(self) -> str:
        """Where the fake GPUs' device files are: the pools' device pattern for this cluster
        (decisions/devices.py)."""
        return f"{self.state_dir}/dev/{NODE}/nvidia{INDEX}"

    @property
    def control_devices(self) -> tuple[str, ...]:
        """Fake control devices, named as the real ones (`/dev/nvidiactl`, ...)."""
        return tuple(f"{self.state_dir}/dev/{p.rsplit('/', 1)[1]}" for p in DEFAULT_CONTROL_DEVICES)

    @property
    def prolog(self) -> str:
        """The Prolog's wrapper (docker/slurm/cluster.sh writes it)."""
        return f"{self.etc_dir}/switchyard-prolog"

    @property
    def epilog(self) -> str:
        return f"{self.etc_dir}/switchyard-epilog"

    def device(self, node: str, index: int) -> str:
        return fill(self.gpu_device_pattern, node=node, index=index)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """A node as Slurm runs it here: its capacity, its pool, and the port its slurmd uses."""

    node: NodeView
    pool: str
    port: int

    @property
    def name(self) -> str:
        return self.node.name


class SlurmConfigError(ValueError):
    """The site cannot be written as a Slurm configuration (the message says why)."""


# --- small formatters -----------------------------------------------------------------------


def check_name(kind: str, name: str) -> str:
    if not _NAME.fullmatch(name or ""):
        raise SlurmConfigError(
            f"{kind} name {name!r} cannot be used in Slurm's configuration: "
            "expected letters, digits, '.', '_' or '-' (at most 63, not starting with a symbol)"
        )
    return name


def check_path(kind: str, path: str) -> str:
    if not _PATH.fullmatch(path or "") or "//" in path or "/../" in f"{path}/":
        raise SlurmConfigError(
            f"{kind} {path!r} cannot be used in Slurm's configuration: expected an absolute "
            "path of letters, digits, '.', '_', '+', '-' and '/'"
        )
    return path


def slurm_time(seconds: int | None) -> str:
    """A time limit as Slurm writes it: `UNLIMITED`, `H:MM:SS` or `D-HH:MM:SS`.

    Slurm keeps limits in whole minutes, so a limit is rounded up to the next minute (a limit
    is never shortened).
    """
    if seconds is None:
        return "UNLIMITED"
    if seconds < 0:
        raise SlurmConfigError(f"a time limit cannot be negative, got {seconds}")
    minutes = max(1, math.ceil(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days}-{hours:02d}:{mins:02d}:00"
    return f"{hours}:{mins:02d}:00"


def oversubscribe(queue: QueuePolicy) -> str:
    if queue.allocation == WHOLE_NODE:
        return "EXCLUSIVE"
    if queue.cpu_oversubscription > 1:
        return f"FORCE:{queue.cpu_oversubscription}"
    return "NO"


def def_mem_per_cpu(queue: QueuePolicy, nodes: Sequence[NodeView]) -> int:
    """MiB per allocated CPU for a job that does not say `--mem`.

    The smallest share in the pool: every node can hold as many such jobs as it has CPU slots
    (CPUs × oversubscription) without running out of memory. Whole-node jobs get every CPU,
    hence the whole memory of the node, either way.
    """
    ratio = 1 if queue.allocation == WHOLE_NODE else max(1, queue.cpu_oversubscription)
    shares = [n.memory_mib // (n.cpus * ratio) for n in nodes if n.cpus > 0]
    return max(1, min(shares)) if shares else 1


# --- choosing and numbering nodes -----------------------------------------------------------


def _shape(node: NodeView) -> tuple:
    return (node.cpus, node.memory_mib, node.gpus, node.gpu_model or "")


def scale_down(
    pool_nodes: Mapping[str, Sequence[NodeView]], max_per_pool: int | None
) -> dict[str, tuple[NodeView, ...]]:
    """At most `max_per_pool` nodes of each pool, each keeping its real cpus/memory/gpus.

    Nodes are taken in name order, round-robin over the pool's node shapes, so a pool of
    GPU and CPU-only nodes keeps one of each when it keeps two. The choice is deterministic:
    the same site always gives the same nodes.
    """
    if max_per_pool is None:
        return {
            pool: tuple(sorted(nodes, key=lambda n: n.name)) for pool, nodes in pool_nodes.items()
        }
    if max_per_pool < 1:
        raise SlurmConfigError(f"max nodes per pool must be at least 1, got {max_per_pool}")
    scaled: dict[str, tuple[NodeView, ...]] = {}
    for pool, nodes in pool_nodes.items():
        groups: dict[tuple, list[NodeView]] = {}
        for node in sorted(nodes, key=lambda n: n.name):
            groups.setdefault(_shape(node), []).append(node)
        order = sorted(groups.values(), key=lambda group: group[0].name)
        chosen: list[NodeView] = []
        depth = 0
        while len(chosen) < max_per_pool and any(depth < len(g) for g in order):
            for group in order:
                if depth < len(group) and len(chosen) < max_per_pool:
                    chosen.append(group[depth])
            depth += 1
        scaled[pool] = tuple(sorted(chosen, key=lambda n: n.name))
    return scaled


def slurm_nodes(
    pool_nodes: Mapping[str, Sequence[NodeView]], port_base: int
) -> tuple[SlurmNode, ...]:
    """Every node with its pool and a unique port (port_base + index in name order)."""
    flat = sorted(
        ((node, pool) for pool, nodes in pool_nodes.items() for node in nodes),
        key=lambda pair: pair[0].name,
    )
    seen: set[str] = set()
    result = []
    for index, (node, pool) in enumerate(flat):
        check_name("node", node.name)
        check_name("pool", pool)
        if node.name in seen:
            raise SlurmConfigError(f"node {node.name!r} is listed twice")
        seen.add(node.name)
        result.append(SlurmNode(node=node, pool=pool, port=port_base + index))
    if result and result[-1].port > 65535:
        raise SlurmConfigError(f"too many nodes for ports from {port_base}")
    return tuple(result)


# --- slurm.conf -----------------------------------------------------------------------------


def node_line(node: SlurmNode, cluster: ClusterSettings) -> str:
    n = node.node
    if n.cpus < 1 or n.memory_mib < 1:
        raise SlurmConfigError(f"node {n.name!r} needs at least one CPU and some memory")
    features = [node.pool]
    if n.gpu_model:
        features.append(check_name("GPU model", n.gpu_model))
    parts = [
        f"NodeName={n.name}",
        f"NodeHostname={cluster.hostname}",
        f"NodeAddr={cluster.address}",
        f"Port={node.port}",
        f"CPUs={n.cpus}",
        "Boards=1",
        "SocketsPerBoard=1",
        f"CoresPerSocket={n.cpus}",
        "ThreadsPerCore=1",
        f"RealMemory={n.memory_mib}",
    ]
    if n.gpus:
        parts.append(f"Gres=gpu:{n.gpus}")
    parts += [f"Feature={','.join(features)}", "State=UNKNOWN"]
    return " ".join(parts)


def partition_line(queue: QueuePolicy, nodes: Sequence[SlurmNode]) -> str:
    check_name("queue", queue.name)
    if not nodes:
        raise SlurmConfigError(f"queue {queue.name!r}: its pool {queue.pool!r} has no nodes")
    parts = [
        f"PartitionName={queue.name}",
        f"Nodes={','.join(n.name for n in nodes)}",
        f"MaxTime={slurm_time(queue.max_walltime_s)}",
    ]
    default = queue.default_walltime_s
    if default is not None and (queue.max_walltime_s is None or default <= queue.max_walltime_s):
        parts.append(f"DefaultTime={slurm_time(default)}")
    parts += [
        f"OverSubscribe={oversubscribe(queue)}",
        f"DefMemPerCPU={def_mem_per_cpu(queue, [n.node for n in nodes])}",
        "State=UP",
    ]
    return " ".join(parts)


def image_lines(prolog: str, epilog: str, pull_timeout_s: int) -> list[str]:
    """What a site's slurm.conf needs so that its nodes run tasks in images
    (docs/containers.md, "Slurm notes"): the Prolog at allocation on every node of the job
    (Alloc) and the batch script only once every node's Prolog is done (DeferBatch); a batch
    start and a Prolog allowed as long as a pull and its unpack take (a longer Prolog would
    have the job requeued as a node failure, or be killed and the node drained); and a job
    whose Prolog failed requeued, not held."""
    if pull_timeout_s < 1:
        raise SlurmConfigError(f"the image pull timeout must be positive, got {pull_timeout_s}")
    longest = 2 * pull_timeout_s + 120  # the Prolog's own bound is 2 × timeout + 60
    return [
        f"Prolog={check_path('Prolog', prolog)}",
        f"Epilog={check_path('Epilog', epilog)}",
        "PrologFlags=Alloc,DeferBatch",
        f"BatchStartTimeout={longest}",
        f"PrologEpilogTimeout={longest}",
        "SchedulerParameters=nohold_on_prolog_fail",
    ]


def _has_topology(nodes: Iterable[SlurmNode]) -> bool:
    return any(n.node.switch for n in nodes)


def slurm_conf(
    cluster: ClusterSettings, nodes: Sequence[SlurmNode], queues: Sequence[QueuePolicy]
) -> str:
    check_name("cluster", cluster.name)
    check_name("host", cluster.hostname)
    state = check_path("state directory", cluster.state_dir.rstrip("/") or "/")
    by_pool: dict[str, list[SlurmNode]] = {}
    for node in nodes:
        by_pool.setdefault(node.pool, []).append(node)

    lines = [
        "# Generated by Switchyard (manage.py slurm_config) from its pools, nodes and queues.",
        "# Do not edit: change the site in Switchyard and generate again.",
        f"ClusterName={cluster.name}",
        f"SlurmctldHost={cluster.hostname}({cluster.address})",
        f"SlurmctldPort={cluster.ctld_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "",
        "# Authentication: the cluster's own munged, under the state directory.",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={cluster.munge_socket}",
        "",
        "# Every file under one state directory; %n is the node (one slurmd per node).",
        f"StateSaveLocation={state}/ctld",
        f"SlurmdSpoolDir={state}/spool/%n",
        f"SlurmctldPidFile={state}/run/slurmctld.pid",
        f"SlurmdPidFile={state}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={state}/log/slurmctld.log",
        f"SlurmdLogFile={state}/log/slurmd-%n.log",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        "",
        "# Many slurmd on one host, advertising the modelled capacity; no cgroups.",
        "SlurmdParameters=config_overrides",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/linux",
        # Jobs run in a sandbox whose init reaps them: their CPU time reaches TotalCPU through
        # these samples, not the step's rusage (docs/console.md), so sample often.
        "JobAcctGatherFrequency=task=2",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "",
        "# Scheduling: cores, memory and GPUs are consumable; backfill.",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "GresTypes=gpu",
        "PreemptType=preempt/none",
        f"KillWait={cluster.kill_wait_s}",
        "MinJobAge=300",
        "InactiveLimit=0",
        "SlurmdTimeout=30",  # a stopped slurmd: not responding in ~10 s, down in 30
        # A job gets its account's groups as /etc/group has them when it starts: an account
        # joins a project's group with the member (and leaves it with them), where Slurm
        # would keep an account's groups for 600 s (the default) from its last job's start.
        "GroupUpdateTime=0",
        "",
        "# Jobs in images: each node's Prolog pulls the job's image into its cache.",
        *image_lines(cluster.prolog, cluster.epilog, cluster.image_pull_timeout_s),
        "",
        "# Priorities: multifactor, so fair-share counts and `scontrol update Priority=` holds.",
        "PriorityType=priority/multifactor",
        "PriorityDecayHalfLife=7-0",
        "PriorityMaxAge=1-0",
        "PriorityWeightFairshare=10000",
        "PriorityWeightAge=1000",
        "",
        "# Accounting through slurmdbd: `sacct --json` has every job, GPUs included.",
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={cluster.address}",
        f"AccountingStoragePort={cluster.dbd_port}",
        # Slurm clients reach slurmdbd through the munge socket named here, not AuthInfo's.
        f"AccountingStoragePass={cluster.munge_socket}",
        "AccountingStorageTRES=gres/gpu",
        "AccountingStoreFlags=job_comment,job_script",
    ]
    if cluster.enforce_associations:
        lines.append("AccountingStorageEnforce=associations")
    lines.append("JobCompType=jobcomp/none")
    if _has_topology(nodes):
        lines.append("TopologyPlugin=topology/tree")
    lines += ["", "# Nodes (pool in Feature=)."]
    lines += [node_line(node, cluster) for node in nodes]
    lines += ["", "# Partitions: one per queue, over its pool's nodes."]
    for queue in sorted(queues, key=lambda q: q.name):
        members = by_pool.get(queue.pool, [])
        if not members:
            lines.append(f"# queue {queue.name}: pool {queue.pool} has no nodes here, skipped")
            continue
        lines.append(partition_line(queue, members))
    return "\n".join(lines) + "\n"


# --- gres.conf and the fake devices ---------------------------------------------------------


def gpu_devices(cluster: ClusterSettings, nodes: Sequence[SlurmNode]) -> list[tuple[str, str]]:
    """(node, device file) for every GPU: character devices the cluster script creates."""
    return [(n.name, cluster.device(n.name, i)) for n in nodes for i in range(n.node.gpus)]


# Character device numbers of the fakes: a major of the kernel's range for local and
# experimental use (no driver answers them), a minor of their own each, so a job's devices
# can be told apart by their numbers as real GPUs' can.
FAKE_GPU_MAJOR = 240
FAKE_CONTROL_MAJOR = 241


def fake_devices(cluster: ClusterSettings, nodes: Sequence[SlurmNode]) -> list[str]:
    """`path major minor` of every device file the cluster script creates: each GPU's, then
    the control devices."""
    gpus = [path for _, path in gpu_devices(cluster, nodes)]
    lines = [f"{path} {FAKE_GPU_MAJOR} {minor}" for minor, path in enumerate(gpus)]
    if gpus:
        lines += [
            f"{path} {FAKE_CONTROL_MAJOR} {minor}"
            for minor, path in enumerate(cluster.control_devices)
        ]
    return lines


def gres_conf(cluster: ClusterSettings, nodes: Sequence[SlurmNode]) -> str:
    lines = [
        "# Generated by Switchyard (manage.py slurm_config). One line per GPU: slurmd 22.05",
        "# drops GPUs without a File=, so each is a character device under the state directory.",
        "AutoDetect=off",
    ]
    lines += [
        f"NodeName={node} Name=gpu File={check_path('device', path)}"
        for node, path in gpu_devices(cluster, nodes)
    ]
    return "\n".join(lines) + "\n"


# --- topology.conf --------------------------------------------------------------------------

UNSWITCHED = "unswitched"


def topology_conf(nodes: Sequence[SlurmNode]) -> str | None:
    """Leaf switches with their nodes and one top switch above them; None without switches."""
    if not _has_topology(nodes):
        return None
    leaves: dict[str, list[str]] = {}
    for node in nodes:
        switch = node.node.switch or UNSWITCHED
        leaves.setdefault(check_name("switch", switch), []).append(node.name)
    top = "top"
    while top in leaves:
        top = f"{top}-0"
    lines = ["# Generated by Switchyard (manage.py slurm_config) from the nodes' switches."]
    lines += [f"SwitchName={switch} Nodes={','.join(leaves[switch])}" for switch in sorted(leaves)]
    lines.append(f"SwitchName={top} Switches={','.join(sorted(leaves))}")
    return "\n".join(lines) + "\n"


# --- everything at once ---------------------------------------------------------------------


def render(
    cluster: ClusterSettings,
    pool_nodes: Mapping[str, Sequence[NodeView]],
    queues: Sequence[QueuePolicy],
    *,
    max_per_pool: int | None = None,
) -> dict[str, str]:
    """Every file the cluster needs, by name: slurm.conf, gres.conf, topology.conf (when
    nodes have switches), nodes.txt (`name port` per slurmd to start) and devices.txt
    (device files to create: `path major minor`)."""
    chosen = scale_down(pool_nodes, max_per_pool)
    nodes = slurm_nodes(chosen, cluster.node_port_base)
    files = {
        "slurm.conf": slurm_conf(cluster, nodes, queues),
        "gres.conf": gres_conf(cluster, nodes),
        "nodes.txt": "".join(f"{n.name} {n.port}\n" for n in nodes),
        "devices.txt": "".join(f"{line}\n" for line in fake_devices(cluster, nodes)),
    }
    topology = topology_conf(nodes)
    if topology is not None:
        files["topology.conf"] = topology
    return files
