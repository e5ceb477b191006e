"""What runs where, as the portal knows it: running tasks and what they hold on which node.

The portal knows each running task's nodes (its attempt's) and its request; it spreads the
request evenly over those nodes, with distinct GPU indices per node. That is exact for the
local backend's packing of single-node work and close enough elsewhere for the decisions
that use it (whom to preempt, what is idle to lend, when a waiting task could start).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.decisions.types import NodeAllocation
from scheduling.models import Task, TaskState
from scheduling.spec import TaskSpec


@dataclass(frozen=True, slots=True)
class Occupant:
    task: Task
    allocations: tuple[NodeAllocation, ...]
    started_at: float


def running_on(node_names: set[str] | None = None, *, pool: str | None = None) -> list[Occupant]:
    """Running tasks (of a pool, or on some nodes) with what they hold on each node."""
    running = Task.objects.filter(state=TaskState.RUNNING).select_related("queue")
    if pool is not None:
        running = running.filter(queue__pool__name=pool)
    running = running.prefetch_related("attempt_set")
    next_gpu: dict[str, int] = {}
    found = []
    for task in running:
        attempt = max(task.attempt_set.all(), key=lambda a: a.number, default=None)
        if attempt is None or not attempt.nodes:
            continue  # holds no node yet
        nodes = list(attempt.nodes)
        if node_names is not None and not node_names.intersection(nodes):
            continue
        spec = TaskSpec.from_dict(task.spec)
        share = len(nodes)
        gpus = -(-spec.resources.gpus // share)
        allocations = []
        for node in nodes:
            first = next_gpu.get(node, 0)
            next_gpu[node] = first + gpus
            allocations.append(
                NodeAllocation(
                    node=node,
                    cpus=-(-spec.resources.cpus // share),
                    memory_mib=spec.resources.memory_mib,
                    gpu_indices=tuple(range(first, first + gpus)),
                )
            )
        started = (attempt.started_at or task.started_at or task.submitted_at).timestamp()
        found.append(Occupant(task, tuple(allocations), started))
    return found
