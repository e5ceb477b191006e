"""Static admission: can this queue and its pool ever run the task as asked?

This looks at capacity only, never at what is free now: a task that fits an empty pool is
admitted and waits for room; one that could never fit is refused at once, with the field to
change and the largest thing the pool can hold. Drained nodes count, since they come back;
a pool with no nodes at all refuses everything.

Counting follows `place` (see its module docstring): a node offers `cpus × r` CPUs in a queue
with CPU oversubscription `r` (1 for whole-node queues); GPUs and memory are never
oversubscribed; `memory` is per node; with `nodes: N` each node holds `cpus/N`, `gpus/N`
and `memory`; without it the task may spread, GPUs coming with CPUs on their own node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from scheduling.decisions.humanize import count, format_duration, format_memory
from scheduling.decisions.place import WHOLE_NODE, cpu_ratio
from scheduling.decisions.types import NodeView, QueuePolicy, Refused
from scheduling.spec import TaskSpec


@dataclass(frozen=True, slots=True)
class NodeShape:
    """`count` nodes of one size in a pool."""

    cpus: int
    memory_mib: int
    gpus: int
    gpu_model: str | None
    count: int


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """A pool's nodes grouped by size: what `check` needs, a few entries even for big pools.

    Build it with `pool_capacity(nodes)` and cache it while the pool's nodes do not change.
    """

    shapes: tuple[NodeShape, ...] = ()

    @property
    def node_count(self) -> int:
        return sum(s.count for s in self.shapes)


def pool_capacity(nodes: Iterable[NodeView]) -> PoolCapacity:
    """The capacity summary of a pool's nodes (all of them, available or not)."""
    sizes = Counter((n.cpus, n.memory_mib, n.gpus, n.gpu_model) for n in nodes)
    shapes = [NodeShape(c, m, g, model, k) for (c, m, g, model), k in sizes.items()]
    shapes.sort(key=lambda s: (-s.gpus, -s.cpus, -s.memory_mib, s.gpu_model or ""))
    return PoolCapacity(tuple(shapes))


def check(
    spec: TaskSpec, queue: QueuePolicy, pool: PoolCapacity | Sequence[NodeView]
) -> Refused | None:
    """Why `queue` can never run `spec`, or None if it can.

    `pool` is the queue's pool, as a cached `PoolCapacity` (fast) or its list of nodes.
    """
    walltime = spec.walltime_s
    estimate = spec.estimate_s
    q = queue.name

    limit = queue.max_walltime_s
    if walltime is not None and limit is not None and walltime > limit:
        return Refused(
            f"walltime {format_duration(walltime)} exceeds queue {q}'s maximum of "
            f"{format_duration(limit)}",
            field="walltime",
        )

    if estimate is None:
        if queue.requires_estimate:
            return Refused(
                f"queue {q} requires an estimate of the run time (for example estimate: 40h)",
                field="estimate",
            )
    elif walltime is not None:
        if estimate > walltime:
            return Refused(
                f"estimate {format_duration(estimate)} is longer than walltime "
                f"{format_duration(walltime)}: the task would be stopped before it finishes",
                field="estimate",
            )
    else:
        limit = queue.default_walltime_s or limit
        if limit is not None and estimate > limit:
            return Refused(
                f"estimate {format_duration(estimate)} is longer than queue {q}'s walltime "
                f"limit of {format_duration(limit)}: the task would be stopped before it "
                f"finishes",
                field="estimate",
            )

    if not isinstance(pool, PoolCapacity):
        pool = pool_capacity(pool)
    return _check_resources(spec, queue, pool)


def asked(spec: TaskSpec, field: str | None) -> object:
    """What `spec` asks in the field a refusal names (its `got`), written as the refusal
    writes it; None for a field that is not one of the task's own."""
    r = spec.resources
    values: dict[str, object] = {
        "walltime": spec.walltime_s and format_duration(spec.walltime_s),
        "estimate": spec.estimate_s and format_duration(spec.estimate_s),
        "resources.cpus": r.cpus,
        "resources.gpus": r.gpus,
        "resources.memory": format_memory(r.memory_mib),
        "resources.nodes": r.nodes,
        "resources.gpu_type": r.gpu_type,
    }
    return values.get(field or "")


def _offers(shape: NodeShape, ratio: int) -> str:
    if ratio == 1:
        return str(shape.cpus)
    return f"{shape.cpus * ratio} ({shape.cpus} cores shared 1:{ratio})"


def _check_resources(spec: TaskSpec, queue: QueuePolicy, pool: PoolCapacity) -> Refused | None:
    res = spec.resources
    name = queue.pool
    shapes: Sequence[NodeShape] = pool.shapes
    if not shapes:
        return Refused(f"queue {queue.name}'s pool {name} has no nodes")

    if res.gpu_type is not None:
        shapes = [s for s in shapes if s.gpu_model == res.gpu_type]
        if not shapes:
            models = sorted({s.gpu_model for s in pool.shapes if s.gpu_model and s.gpus})
            has = ", ".join(models) if models else "no GPUs of a named model"
            return Refused(
                f"asks for {res.gpu_type} GPUs; pool {name} has {has}", field="resources.gpu_type"
            )

    ratio = cpu_ratio(queue)
    if res.nodes:
        return _check_per_node(spec, name, shapes, ratio)
    return _check_spread(spec, name, shapes, ratio, whole_node=queue.allocation == WHOLE_NODE)


def _check_per_node(
    spec: TaskSpec, pool: str, shapes: Sequence[NodeShape], ratio: int
) -> Refused | None:
    res = spec.resources
    n = res.nodes or 1
    cpus = -(-res.cpus // n)
    gpus = -(-res.gpus // n)
    memory = res.memory_mib
    where = "on one node" if n == 1 else f"on each of {n} nodes"

    # Narrow the nodes one need at a time; the first need that no node meets is the one to
    # name, with the best the remaining nodes offer.
    if gpus > 0:
        fit = [s for s in shapes if s.gpus >= gpus]
        if not fit:
            most = max(s.gpus for s in shapes)
            has = f"the largest node of pool {pool} has {most}" if most else f"pool {pool} has none"
            return Refused(f"asks {count(gpus, 'GPU')} {where}; {has}", field="resources.gpus")
        with_gpus = f" with {count(gpus, 'GPU')}"
    else:
        fit = list(shapes)
        with_gpus = ""

    cpu_fit = [s for s in fit if s.cpus * ratio >= cpus]
    if not cpu_fit:
        best = max(fit, key=lambda s: s.cpus)
        return Refused(
            f"asks {count(cpus, 'CPU')} {where}; the largest node{with_gpus} of pool {pool} "
            f"offers {_offers(best, ratio)}",
            field="resources.cpus",
        )

    mem_fit = [s for s in cpu_fit if s.memory_mib >= memory]
    if not mem_fit:
        most = max(s.memory_mib for s in cpu_fit)
        return Refused(
            f"asks {format_memory(memory)} of memory per node; the largest node{with_gpus} "
            f"of pool {pool} has {format_memory(most)}",
            field="resources.memory",
        )

    have = sum(s.count for s in mem_fit)
    if have < n:
        each = f"{count(cpus, 'CPU')}, {count(gpus, 'GPU')} and {format_memory(memory)}"
        return Refused(
            f"asks {n} nodes with {each} each; pool {pool} has {have} such "
            f"{'node' if have == 1 else 'nodes'}",
            field="resources.nodes",
        )
    return None


def _check_spread(
    spec: TaskSpec, pool: str, shapes: Sequence[NodeShape], ratio: int, *, whole_node: bool
) -> Refused | None:
    res = spec.resources
    memory = res.memory_mib
    kind = ""
    if res.gpus > 0:
        shapes = [s for s in shapes if s.gpus > 0]
        if not shapes:
            return Refused(
                f"asks {count(res.gpus, 'GPU')}; pool {pool} has no GPU nodes",
                field="resources.gpus",
            )
        kind = "GPU "

    fit = [s for s in shapes if s.memory_mib >= memory]
    if not fit:
        most = max(s.memory_mib for s in shapes)
        return Refused(
            f"asks {format_memory(memory)} of memory per node; the largest {kind}node of pool "
            f"{pool} has {format_memory(most)}",
            field="resources.memory",
        )
    among = "" if len(fit) == len(shapes) else f" on nodes with {format_memory(memory)}"

    total_gpus = sum(s.gpus * s.count for s in fit)
    if total_gpus < res.gpus:
        return Refused(
            f"asks {count(res.gpus, 'GPU')}; pool {pool} has {total_gpus} in all{among}",
            field="resources.gpus",
        )
    total_cpus = sum(s.cpus * ratio * s.count for s in fit)
    if total_cpus < res.cpus:
        return Refused(
            f"asks {count(res.cpus, 'CPU')}; pool {pool} offers {total_cpus} in all{among}",
            field="resources.cpus",
        )

    if res.gpus > 0 and not whole_node:
        # Spread over several nodes, every part needs a CPU beside its GPUs (whole nodes come
        # with all their cores).
        need, got = 0, 0
        for s in fit:  # shapes are sorted by GPUs, most first
            take = min(s.count, -(-(res.gpus - got) // s.gpus))
            need += take
            got += take * s.gpus
            if got >= res.gpus:
                break
        if need > res.cpus:
            return Refused(
                f"asks {count(res.gpus, 'GPU')}, which take at least {need} nodes of pool "
                f"{pool}, but only {count(res.cpus, 'CPU')}: each node needs at least one",
                field="resources.cpus",
            )
    return None
