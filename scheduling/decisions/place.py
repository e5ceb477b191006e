"""Where a task starts now, on nodes whose free capacity is known (local runner, simulator).

How free CPUs are counted
-------------------------
`NodeView.cpus` is physical cores. `NodeView.free_cpus` is physical cores minus the CPUs
allocated on the node, as the tasks asked for them; under oversubscription it goes negative
(a 32-core node holding 100 CPUs of agent tasks has `free_cpus == -68`). It is therefore
independent of any queue, and `NodeView.idle` keeps meaning "nothing allocated".

A queue with `cpu_oversubscription = r` may allocate up to `cpus × r` CPUs on a node, so the
CPUs it can still allocate there are `free_cpus + cpus × (r - 1)` (`usable_cpus`). `check`
uses the same ratio on capacity (`cpus × r`), so a task `check` admits fits an empty pool.
Whole-node queues ignore the ratio: a whole node is the node's own cores.

GPUs and memory are never oversubscribed: GPU indices are exclusive and memory sums to at
most the node's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.spec import TaskSpec

WHOLE_NODE = "whole-node"
PACK = "pack"


def cpu_ratio(queue: QueuePolicy) -> int:
    """How many requested CPUs a physical core may carry in this queue."""
    if queue.allocation == WHOLE_NODE:
        return 1
    return max(1, queue.cpu_oversubscription)


def free_view(node: NodeView, allocations: Iterable[NodeAllocation]) -> NodeView:
    """`node` with free_* computed from the allocations currently on it.

    Allocations for other nodes are ignored, so a caller may pass every live allocation.
    `free_cpus` may be negative under oversubscription (see the module docstring).
    """
    used_cpus = 0
    used_memory = 0
    used_gpus: set[int] = set()
    for a in allocations:
        if a.node != node.name:
            continue
        used_cpus += a.cpus
        used_memory += a.memory_mib
        if a.gpu_indices:
            used_gpus.update(a.gpu_indices)
    return NodeView(
        name=node.name,
        cpus=node.cpus,
        memory_mib=node.memory_mib,
        gpus=node.gpus,
        free_cpus=node.cpus - used_cpus,
        free_memory_mib=node.memory_mib - used_memory,
        free_gpus=tuple(i for i in range(node.gpus) if i not in used_gpus) if node.gpus else (),
        gpu_model=node.gpu_model,
        switch=node.switch,
        available=node.available,
        available_until=node.available_until,
    )


def usable_cpus(node: NodeView, ratio: int = 1) -> int:
    """CPUs a queue with oversubscription `ratio` may still allocate on `node`."""
    free = node.cpus if node.free_cpus is None else node.free_cpus
    return free + node.cpus * (ratio - 1)


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class _Free:
    """One node's free room now, computed once per place() call."""

    __slots__ = ("node", "cpus", "memory", "gpus")

    def __init__(self, node: NodeView, ratio: int) -> None:
        self.node = node
        free = node.cpus if node.free_cpus is None else node.free_cpus
        self.cpus = free + node.cpus * (ratio - 1)  # usable_cpus, inlined: place() is hot
        self.memory = node.memory_mib if node.free_memory_mib is None else node.free_memory_mib
        gpus = node.free_gpus
        if gpus is None:
            self.gpus = tuple(range(node.gpus))
        else:
            self.gpus = tuple(sorted(gpus)) if len(gpus) > 1 else tuple(gpus)

    def fits(self, cpus: int, gpus: int, memory: int) -> bool:
        return self.cpus >= cpus and len(self.gpus) >= gpus and self.memory >= memory

    def allocate(self, cpus: int, gpus: int, memory: int) -> NodeAllocation:
        # Lowest free indices first, so CUDA_VISIBLE_DEVICES is predictable.
        return NodeAllocation(self.node.name, cpus, memory, self.gpus[:gpus])


def place(
    spec: TaskSpec, queue: QueuePolicy, nodes: Sequence[NodeView], *, now: float | None = None
) -> Placement | None:
    """Where `spec` starts now in `queue`, or None if it does not fit now.

    Unavailable (drained, down) nodes are skipped, and with `resources.gpu_type` only nodes
    of that GPU model count. A node lent until some time takes only work whose walltime ends
    before then (`now` must be given for lent nodes to count at all). Whole-node queues take
    idle nodes entirely; pack queues put a task on the fullest node that still holds it
    (best fit, ties by name), and spread it over the nodes with the most free room only if
    no single node holds it. Work on several nodes goes under one switch when some switch
    has room for all of it; otherwise across switches, and the placement's note says so.
    """
    res = spec.resources
    usable = [
        n
        for n in nodes
        if n.available
        and (res.gpu_type is None or n.gpu_model == res.gpu_type)
        and (n.available_until is None or fits_before(spec, n.available_until, now))
    ]
    if queue.allocation == WHOLE_NODE:
        return _place_whole_nodes(spec, usable)
    ratio = cpu_ratio(queue)
    return _place_packed(spec, [_Free(n, ratio) for n in usable])


def fits_before(spec: TaskSpec, until: float | None, now: float | None) -> bool:
    """Whether `spec` may run on a node available until `until`: its walltime must end
    before then (what fits on a lease). A node with no end takes anything."""
    if until is None:
        return True
    return now is not None and spec.walltime_s is not None and now + spec.walltime_s <= until


def _whole(node: NodeView) -> NodeAllocation:
    return NodeAllocation(
        node.name, node.cpus, node.memory_mib, tuple(range(node.gpus)), whole_node=True
    )


def _smallest_first(n: NodeView) -> tuple[int, int, int, str]:
    return (n.gpus, n.cpus, n.memory_mib, n.name)


def _largest_first(n: NodeView) -> tuple[int, int, int, str]:
    return (-n.gpus, -n.cpus, -n.memory_mib, n.name)


def _most_cores_first(n: NodeView) -> tuple[int, int, int, str]:
    # For CPU-only work: many cores, and GPU nodes last.
    return (-n.cpus, n.gpus, -n.memory_mib, n.name)


def _place_whole_nodes(spec: TaskSpec, nodes: list[NodeView]) -> Placement | None:
    res = spec.resources
    idle = [n for n in nodes if n.idle and n.memory_mib >= res.memory_mib]
    if res.nodes:
        cpus_each = _ceil_div(res.cpus, res.nodes)
        gpus_each = _ceil_div(res.gpus, res.nodes)
        fit = [n for n in idle if n.cpus >= cpus_each and n.gpus >= gpus_each]
        if len(fit) < res.nodes:
            return None
        # The smallest nodes that do the job, keeping the big ones for tasks that need them;
        # under one switch when one has enough of them.
        together, note = _one_switch(fit, res.nodes, key=_smallest_first)
        return Placement(tuple(_whole(n) for n in together), note)

    if res.gpus > 0:
        idle = [n for n in idle if n.gpus > 0]
    single = [n for n in idle if n.cpus >= res.cpus and n.gpus >= res.gpus]
    if single:
        return Placement((_whole(min(single, key=_smallest_first)),))
    # The fewest nodes: take the largest first until cores and GPUs are covered.
    chosen: list[NodeView] = []
    cpus = gpus = 0
    for n in sorted(idle, key=_largest_first if res.gpus else _most_cores_first):
        chosen.append(n)
        cpus += n.cpus
        gpus += n.gpus
        if cpus >= res.cpus and gpus >= res.gpus:
            return Placement(tuple(_whole(n) for n in chosen))
    return None


def _one_switch(
    nodes: list[NodeView], count: int, *, key: Callable[[NodeView], tuple]
) -> tuple[list[NodeView], str]:
    """`count` of `nodes` in `key` order, all under one switch if one switch has that many.

    Among switches that can hold all of it, the one whose best nodes come first in `key`
    order; with none, the first `count` in `key` order, whatever their switches.
    """
    ordered = sorted(nodes, key=key)
    if count <= 1:
        return ordered[:count], ""
    groups: dict[str | None, list[NodeView]] = {}
    for n in ordered:
        groups.setdefault(n.switch, []).append(n)
    whole = [g[:count] for switch, g in groups.items() if switch is not None and len(g) >= count]
    if whole:
        return min(whole, key=lambda g: [key(n) for n in g]), ""
    chosen = ordered[:count]
    switches = {n.switch for n in chosen}
    if len(switches) <= 1:
        return chosen, ""
    return chosen, (
        f"placed across {len(switches)} switches: no switch has {count} free nodes for it"
    )


def _best_fit_key(spec: TaskSpec) -> Callable[[_Free], tuple[int, int, int, str]]:
    res = spec.resources

    def key(f: _Free) -> tuple[int, int, int, str]:
        # Least room left after placing: GPUs first, so CPU-only tasks keep off GPU nodes.
        return (len(f.gpus) - res.gpus, f.cpus - res.cpus, f.memory - res.memory_mib, f.node.name)

    return key


def _most_free(f: _Free) -> tuple[int, int, int, str]:
    return (-len(f.gpus), -f.cpus, -f.memory, f.node.name)


def _most_free_cores(f: _Free) -> tuple[int, int, int, str]:
    # For CPU-only work: most free CPUs, and nodes with free GPUs last.
    return (-f.cpus, len(f.gpus), -f.memory, f.node.name)


def _place_packed(spec: TaskSpec, free: list[_Free]) -> Placement | None:
    res = spec.resources
    memory = res.memory_mib

    if res.nodes is None or res.nodes == 1:
        need_cpus, need_gpus = res.cpus, res.gpus  # f.fits(), inlined: place() is hot
        fit = [
            f
            for f in free
            if f.cpus >= need_cpus and len(f.gpus) >= need_gpus and f.memory >= memory
        ]
        if fit:
            best = min(fit, key=_best_fit_key(spec))
            return Placement((best.allocate(res.cpus, res.gpus, memory),))
        if res.nodes == 1:
            return None

    if res.nodes:
        cpus_each = _ceil_div(res.cpus, res.nodes)
        gpus_each = _ceil_div(res.gpus, res.nodes)
        fit = [f for f in free if f.fits(cpus_each, gpus_each, memory)]
        if len(fit) < res.nodes:
            return None
        key = _most_free if res.gpus else _most_free_cores
        by_node = {f.node.name: f for f in fit}
        together, note = _one_switch(
            [f.node for f in fit], res.nodes, key=lambda n: key(by_node[n.name])
        )
        return Placement(
            tuple(by_node[n.name].allocate(cpus_each, gpus_each, memory) for n in together), note
        )

    # No node count given and no single node holds it: spread, most free room first. GPUs
    # come with CPUs on their node, so a GPU task only uses nodes with a free GPU.
    candidates = [
        f for f in free if f.memory >= memory and f.cpus >= 1 and (res.gpus == 0 or f.gpus)
    ]
    candidates.sort(key=_most_free if res.gpus else _most_free_cores)
    chosen: list[_Free] = []
    cpus = gpus = 0
    for f in candidates:
        chosen.append(f)
        cpus += f.cpus
        gpus += len(f.gpus)
        if cpus >= res.cpus and gpus >= res.gpus:
            break
    else:
        return None
    if res.cpus < len(chosen):
        return None  # every part needs at least one CPU

    gpus_left = res.gpus
    gpu_share = []
    for f in chosen:
        g = min(len(f.gpus), gpus_left)
        gpu_share.append(g)
        gpus_left -= g
    # One CPU for each part first, then fill in order.
    cpus_left = res.cpus - len(chosen)
    cpu_share = []
    for f in chosen:
        c = min(f.cpus - 1, cpus_left)
        cpu_share.append(1 + c)
        cpus_left -= c
    return Placement(
        tuple(
            f.allocate(c, g, memory) for f, c, g in zip(chosen, cpu_share, gpu_share, strict=True)
        )
    )
