"""Plain values the decision functions take and return. No ORM, no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Classified:
    type: str
    reason: str


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    name: str
    pool: str
    task_types: tuple[str, ...]  # the types this queue takes; empty = any
    max_walltime_s: int | None = None  # None: no hard limit
    default_walltime_s: int | None = None
    requires_estimate: bool = False
    preemptible: bool = False
    allocation: str = "pack"  # "pack" | "whole-node"
    cpu_oversubscription: int = 1  # 4 means 1:4
    max_concurrency: int | None = None
    policy: str = "fairshare"  # "fairshare" | "priority-quota" | "elastic"
    # Live sandboxes (docs/sandboxes.md): over max_concurrency a new one waits ("queue") or
    # is refused ("refuse"); one without an exec for `idle_scale_in_s` (None: 120) ends.
    over_concurrency: str = "queue"
    idle_scale_in_s: int | None = None
    # A task ready for longer than this goes before every task of the pool not past it, and
    # is never passed again (docs/policy.md, "A bound on waiting"); None: no bound.
    wait_bound_s: int | None = None


@dataclass(frozen=True, slots=True)
class RoutingRuleView:
    order: int
    queue: str
    match_type: str | None = None  # None: any type
    min_gpus: int | None = None
    min_cpus: int | None = None


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node's capacity and what is free on it now (free_* = capacity when idle)."""

    name: str
    cpus: int
    memory_mib: int
    gpus: int = 0
    free_cpus: int | None = None
    free_memory_mib: int | None = None
    free_gpus: tuple[int, ...] | None = None  # indices of free GPUs
    gpu_model: str | None = None
    switch: str | None = None
    available: bool = True  # False when drained / down
    # A node lent to this queue's pool until then (epoch seconds): only work whose walltime
    # ends before it may be placed there (docs/capacity.md).
    available_until: float | None = None

    @property
    def idle(self) -> bool:
        return (
            self.free_cpus in (None, self.cpus)
            and self.free_memory_mib in (None, self.memory_mib)
            and (self.free_gpus is None or len(self.free_gpus) == self.gpus)
        )


@dataclass(frozen=True, slots=True)
class Routed:
    queue: str
    reason: str


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str
    field: str | None = None


@dataclass(frozen=True, slots=True)
class NodeAllocation:
    node: str
    cpus: int
    memory_mib: int
    gpu_indices: tuple[int, ...] = ()
    whole_node: bool = False


@dataclass(frozen=True, slots=True)
class Placement:
    allocations: tuple[NodeAllocation, ...] = field(default_factory=tuple)
    note: str = ""  # what the placement could not honour (e.g. one switch), in words

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(a.node for a in self.allocations)


@dataclass(frozen=True, slots=True)
class GpuUse:
    """What a job did with its GPUs, sampled from nvidia-smi while it ran (gpuwatch.py):
    how many of them its processes were seen on, their utilisation while it was on them, the
    most GPU memory its processes held at once."""

    samples: int
    gpus_busy: int
    util_mean: float  # %
    util_peak: float  # %
    memory_peak_mib: int

    @classmethod
    def from_dict(cls, data: object) -> GpuUse | None:
        """From the supervisor's or the watcher's summary; None for anything else. A Slurm
        job's account can write the watcher's file: figures out of their range are refused,
        never stored."""
        if not isinstance(data, dict):
            return None
        try:
            use = cls(
                samples=int(data["samples"]),
                gpus_busy=int(data["gpus_busy"]),
                util_mean=float(data["util_mean"]),
                util_peak=float(data["util_peak"]),
                memory_peak_mib=int(data["memory_peak_mib"]),
            )
        except (KeyError, TypeError, ValueError, OverflowError):
            return None
        sane = (
            0 < use.samples < 1 << 31
            and 0 <= use.gpus_busy <= 1024
            and 0.0 <= use.util_mean <= use.util_peak <= 100.0
            and 0 <= use.memory_peak_mib < 1 << 31
        )
        return use if sane else None


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a finished job as its backend accounted it: what was allocated, for how
    long (docs/accounting.md). A job Slurm requeued has several runs."""

    job_id: str  # the backend's own id of the job (Slurm: the numeric job id)
    key: str  # the job's name: the attempt's key
    cpus: int
    gpus: int
    memory_mib: int
    nodes: int
    elapsed_ms: int
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # The portal instance that made the job, where the backend keeps it ("": this backend
    # serves one portal only).
    portal: str = ""
    # CPU time the job's processes used (user + system), when the backend measures it: the
    # supervisor's rusage on the local backend, `sacct` TotalCPU on Slurm.
    cpu_ms: int | None = None
    # What it did with its GPUs, where the backend sampled them (a GPU job on a node with
    # nvidia-smi): the local supervisor's samples, the Slurm job's watcher's.
    gpu: GpuUse | None = None
    # Whether `elapsed_ms` includes the pull of the job's image (Slurm: the Prolog pulls it
    # inside the allocation); the meter takes the attempt's recorded pull off it then.
    pull_in_elapsed: bool = False
