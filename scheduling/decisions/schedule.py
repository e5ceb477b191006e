"""One scheduling pass: which waiting jobs start now, where, and why the others wait.

The local backend runs this pass under its lock whenever capacity may have changed; the
simulator runs it at every event. Jobs are taken in priority then submit order; a job that
does not fit does not block the smaller ones behind it (backfill). Placement itself is
`place()`, which applies the queue's policy (whole-node, pack, CPU oversubscription).

The pass decides only; the caller carries the decisions out. It assumes every `Start` it
returns succeeds: a start that fails leaves its capacity idle until the next pass.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduling.decisions.place import free_view, place
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.spec import TaskSpec


@dataclass(frozen=True, slots=True)
class WaitingJob:
    key: str
    spec: TaskSpec
    queue: QueuePolicy
    priority: int = 0  # higher starts first
    seq: int = 0  # submit order among equal priorities
    sandboxed: bool = False  # needs the sandbox to run at all


@dataclass(frozen=True, slots=True)
class Start:
    key: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Wait:
    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class Fail:
    """The job can never start: fail it with `reason`."""

    key: str
    reason: str


Decision = Start | Wait | Fail


def schedule_pass(
    waiting: Sequence[WaitingJob],
    *,
    pools: Mapping[str, Sequence[NodeView]],
    allocations: Mapping[str, Sequence[NodeAllocation]],
    running: Mapping[str, int],
    drained: Mapping[str, str] | frozenset[str] = frozenset(),
    sandbox_missing: str | None = None,
    now: float | None = None,
) -> list[Decision]:
    """Decide every waiting job, in the order they are considered.

    `pools` maps a pool name to its nodes ("" holds nodes for queues whose pool is not
    listed); `allocations` the live allocations by node name; `running` the jobs running per
    queue (for `max_concurrency`); `drained` the names of nodes taken out of service;
    `sandbox_missing` the reason a sandboxed job cannot start, when no sandbox is available;
    `now` the time, for nodes lent until a time (docs/capacity.md).
    """
    booked: dict[str, list[NodeAllocation]] = {n: list(a) for n, a in allocations.items()}
    per_queue = Counter(running)
    decisions: list[Decision] = []
    for job in sorted(waiting, key=lambda j: (-j.priority, j.seq)):
        queue = job.queue
        if job.sandboxed and sandbox_missing:
            # Never fall back to running an agent/sandbox task without its sandbox.
            decisions.append(Fail(job.key, sandbox_missing))
            continue
        nodes = pools.get(queue.pool, pools.get("", ()))
        # Could it ever fit, on this pool emptied and every node back up?
        ideal = [
            free_view(dataclasses.replace(n, available=True, available_until=None), ())
            for n in nodes
        ]
        if place(job.spec, queue, ideal) is None:
            decisions.append(Fail(job.key, never_fits(job, nodes)))
            continue
        if queue.max_concurrency is not None and per_queue[queue.name] >= queue.max_concurrency:
            reason = f"queue {queue.name} runs its maximum of {queue.max_concurrency} jobs"
            decisions.append(Wait(job.key, reason))
            continue
        views = [
            free_view(
                dataclasses.replace(n, available=False) if n.name in drained else n,
                booked.get(n.name, ()),
            )
            for n in nodes
        ]
        placement = place(job.spec, queue, views, now=now)
        if placement is None:
            decisions.append(Wait(job.key, waiting_reason(job, drained, nodes)))
            continue
        decisions.append(Start(job.key, placement))
        for a in placement.allocations:
            booked.setdefault(a.node, []).append(a)
        per_queue[queue.name] += 1
    return decisions


def asked(job: WaitingJob) -> str:
    """What the job asks for, in a reason's words."""
    r = job.spec.resources
    parts = [f"cpus={r.cpus}", f"memory={r.memory_mib} MiB"]
    if r.gpus:
        parts.append(f"gpus={r.gpus}" + (f" ({r.gpu_type})" if r.gpu_type else ""))
    if r.nodes:
        parts.append(f"nodes={r.nodes}")
    if job.queue.allocation == "whole-node":
        parts.append("whole nodes")
    return ", ".join(parts)


def never_fits(job: WaitingJob, nodes: Sequence[NodeView]) -> str:
    pool = job.queue.pool
    if not nodes:
        return f"pool {pool} has no nodes on local backend: nothing can run there"
    biggest = max(nodes, key=lambda n: (n.gpus, n.cpus, n.memory_mib))
    return (
        f"no node of pool {pool} can ever hold this request ({asked(job)}); "
        f"its largest node has {biggest.cpus} cpus, {biggest.memory_mib} MiB, "
        f"{biggest.gpus} GPUs"
    )


def waiting_reason(
    job: WaitingJob, drained: Mapping[str, str] | frozenset[str], nodes: Sequence[NodeView]
) -> str:
    reason = f"waiting for resources in pool {job.queue.pool} ({asked(job)})"
    down = [n.name for n in nodes if n.name in drained or not n.available]
    if down:
        reason += f"; drained or down: {', '.join(sorted(down))}"
    return reason
