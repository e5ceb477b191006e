"""A node's device files, and which of them a job gets. Plain values; no ORM, no I/O.

A pool says where its nodes keep their GPUs' device files (a pattern such as
`/dev/nvidia{index}`) and the control devices every GPU job needs (`/dev/nvidiactl`, ...);
a node may say otherwise. A job gets exactly the device files of the GPUs it was allocated,
under their own names (the host's `/dev/nvidia3` is `/dev/nvidia3` inside: NVIDIA's libraries
find a GPU's file by its minor number), plus the control devices; CUDA counts the GPUs it can
open from 0, so CUDA_VISIBLE_DEVICES inside is `0,1,…`. A multi-node job whose ranks share
one sandbox (the local backend) gets the files of every node's GPUs it holds, and each rank
names its own node's among them (job_devices). A job without GPUs gets none
(docs/security.md).

Patterns name `{index}` (the GPU's index on its node; on Slurm the job's GPU files are the
node's gres.conf File= entries at the places `SLURM_JOB_GPUS` gives, backends/devices.py)
and may name `{node}`. Inside the sandbox every device
is `/dev/<its file name>`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

INDEX = "{index}"
NODE = "{node}"
DEFAULT_GPU_DEVICE = "/dev/nvidia{index}"
# nvidia-modeset is not among them: CUDA does not need it, and many compute nodes lack it
# (a missing device fails the job). A pool that needs it adds it.
DEFAULT_CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")

# Letters, digits and `._+-/`, and the two placeholders: nothing a shell, a Slurm script or
# bubblewrap's argv could read as anything but a path.
_PART = re.compile(r"[A-Za-z0-9._+/-]*")
_PLACEHOLDER = re.compile(r"(\{index\}|\{node\})")
# What bubblewrap's own /dev already holds: no device may hide them.
RESERVED = frozenset(
    {"null", "zero", "full", "random", "urandom", "tty", "console", "ptmx", "pts", "shm", "fd"}
    | {"stdin", "stdout", "stderr", "core", "mqueue", "hugepages"}
)


@dataclass(frozen=True, slots=True)
class DeviceFiles:
    """Where a node keeps its GPUs' device files (`gpu`, a pattern with `{index}`) and the
    control devices a GPU job needs besides them."""

    gpu: str
    control: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceTable:
    """The device files of the nodes a job may run on: `default` (its pool's) unless `nodes`
    names a node's own. None stands for no device files (virtual GPUs, bookkeeping only)."""

    default: DeviceFiles | None = None
    nodes: tuple[tuple[str, DeviceFiles | None], ...] = ()

    def for_node(self, node: str) -> DeviceFiles | None:
        for name, files in self.nodes:
            if name == node:
                return files
        return self.default

    @property
    def any(self) -> bool:
        return self.default is not None or any(files for _, files in self.nodes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "default": _files_dict(self.default),
            "nodes": [[name, _files_dict(files)] for name, files in self.nodes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> DeviceTable:
        if not data:
            return NO_DEVICES
        return cls(
            default=_files_from(data.get("default")),
            nodes=tuple((str(name), _files_from(files)) for name, files in data.get("nodes", ())),
        )


NO_DEVICES = DeviceTable()


def device_table(
    default: DeviceFiles | None, nodes: Iterable[tuple[str, DeviceFiles | None]]
) -> DeviceTable:
    """A pool's table: its own files, and those of the nodes (of any pool a job of it may be
    lent) whose files differ."""
    return DeviceTable(default, tuple((name, f) for name, f in nodes if f != default))


def device_files(gpu: str, control: Sequence[str]) -> DeviceFiles | None:
    """A pool's or node's fields as a value; no GPU pattern: no device files."""
    return DeviceFiles(gpu, tuple(control)) if gpu else None


def device_binds(
    files: DeviceFiles | None, node: str, gpu_indices: Sequence[int]
) -> tuple[tuple[str, str, str], ...]:
    """(host path, path inside the sandbox, what it is) for each device file a job with these
    GPUs of `node` gets: its GPUs, then the control devices. None for a job without GPUs, or
    on a node without device files.

    A GPU's file keeps its host name inside (`/dev/nvidia3` stays `/dev/nvidia3`), as Docker's
    and Kubernetes' GPU plugins keep it: NVIDIA's libraries open `/dev/nvidia<minor>` by the
    minor number the driver reports, so a renamed file would not be found. CUDA counts only
    the GPUs it can open, from 0, so `CUDA_VISIBLE_DEVICES` inside is `0,1,…`."""
    if files is None or not gpu_indices:
        return ()
    binds = [
        (
            fill(files.gpu, node=node, index=host),
            inside_path(files.gpu, node=node, index=host),
            f"GPU {host} of node {node}",
        )
        for host in gpu_indices
    ]
    for path in files.control:
        host = fill(path, node=node)
        binds.append((host, inside_path(path, node=node), f"control device of node {node}"))
    return tuple(binds)


@dataclass(frozen=True, slots=True)
class JobDevices:
    """The device files of a whole job (`binds`, as device_binds gives them: its GPUs in the
    order CUDA counts them, then the control devices once) and, for each of its allocations
    in turn, the positions of that allocation's GPUs among the GPU files bound: what
    CUDA_VISIBLE_DEVICES names for the process that runs on that node."""

    binds: tuple[tuple[str, str, str], ...]
    visible: tuple[tuple[int, ...], ...]


def job_devices(
    table: DeviceTable,
    allocations: Sequence[tuple[str, Sequence[int]]],
    minor: Callable[[str], int | None],
) -> JobDevices:
    """The device files of every allocation `(node, GPU indices)` of a job that runs in one
    sandbox (a multi-node job on the local backend: all its ranks share it, and all the GPUs
    are the job's own).

    CUDA counts the GPU files it can open by their minor numbers (`minor(host path)`; None
    where the file cannot be read, which fails the job before it starts), so the GPU files are
    bound in that order and each allocation's CUDA_VISIBLE_DEVICES is its GPUs' places among
    them. A GPU's file is named inside by its minor number (`/dev/nvidia<minor>`: on a real
    node its own name), as NVIDIA's libraries look it up: two nodes' `nvidia0` stay apart."""
    gpus: dict[str, tuple[str, str, int | None]] = {}  # host path: (inside, what, minor)
    control: dict[str, tuple[str, str, str]] = {}
    wanted: list[list[str]] = []
    for node, indices in allocations:
        files = table.for_node(node)
        hosts: list[str] = []
        if files is not None and indices:
            for index in indices:
                host = fill(files.gpu, node=node, index=index)
                number = minor(host)
                inside = inside_path(
                    files.gpu, node=node, index=index if number is None else number
                )
                gpus.setdefault(host, (inside, f"GPU {index} of node {node}", number))
                hosts.append(host)
            for path in files.control:
                host = fill(path, node=node)
                what = f"control device of node {node}"
                control.setdefault(host, (host, inside_path(path, node=node), what))
        wanted.append(hosts)
    # By minor number, those without one last in the order given (the job fails on them).
    order = sorted(gpus, key=lambda h: (gpus[h][2] is None, gpus[h][2] or 0))
    kept: list[str] = []
    inside_seen: set[str] = set()
    for host in order:
        if gpus[host][0] not in inside_seen:  # two names of one device: bound once
            inside_seen.add(gpus[host][0])
            kept.append(host)
    place = {}
    for host in order:
        place[host] = next(at for at, k in enumerate(kept) if gpus[k][0] == gpus[host][0])
    binds = tuple((host, gpus[host][0], gpus[host][1]) for host in kept)
    binds += tuple(c for c in control.values() if c[1] not in inside_seen) if kept else ()
    visible = tuple(tuple(sorted({place[h] for h in hosts})) for hosts in wanted)
    return JobDevices(binds, visible)


def parts(pattern: str) -> list[str]:
    """The pattern split around its placeholders, which are kept: "/dev/nvidia{index}" is
    ["/dev/nvidia", "{index}", ""]."""
    return _PLACEHOLDER.split(pattern)


def fill(pattern: str, *, node: str, index: int | None = None) -> str:
    path = pattern.replace(NODE, node)
    return path if index is None else path.replace(INDEX, str(index))


def inside_path(pattern: str, *, node: str, index: int | None = None) -> str:
    """Where a device file is inside the sandbox: /dev/<its file name>."""
    return "/dev/" + fill(pattern, node=node, index=index).rsplit("/", 1)[-1]


def gpu_pattern_error(pattern: str) -> str | None:
    """Why this cannot be a GPU device pattern, or None (empty: no device files)."""
    if not pattern:
        return None
    if why := _path_error(pattern):
        return why
    if INDEX not in pattern.rsplit("/", 1)[-1]:
        return "the file name must contain {index} (each GPU has its own device file)"
    return None


def control_devices_error(paths: object) -> str | None:
    """Why this cannot be a list of control devices, or None."""
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        return 'a list of absolute paths, e.g. ["/dev/nvidiactl", "/dev/nvidia-uvm"]'
    for path in paths:
        if why := _path_error(path):
            return f"{path}: {why}"
        if INDEX in path:
            return f"{path}: a control device is shared by the node's GPUs: no {INDEX}"
    names = [inside_path(p, node="n") for p in paths]
    if len(set(names)) != len(names):
        return "two control devices would have the same name inside the sandbox"
    return None


def _path_error(pattern: str) -> str | None:
    if not pattern.startswith("/"):
        return "must be an absolute path"
    if not all(_PART.fullmatch(part) for part in parts(pattern)[::2]):
        return "only letters, digits, '._+-/' and the placeholders {index} and {node}"
    if ".." in pattern.split("/"):
        return "must not contain '..'"
    name = pattern.rsplit("/", 1)[-1]
    if not name or name in RESERVED or name.startswith("."):
        return f"{name or 'an empty file name'!r} cannot be a device's name inside the sandbox"
    return None


def _files_dict(files: DeviceFiles | None) -> dict[str, Any] | None:
    return None if files is None else {"gpu": files.gpu, "control": list(files.control)}


def _files_from(data: Mapping[str, Any] | None) -> DeviceFiles | None:
    return None if not data else DeviceFiles(str(data["gpu"]), tuple(data.get("control", ())))
