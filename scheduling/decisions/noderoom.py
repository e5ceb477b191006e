"""A node's free room as running work gives it back and reservations hold it: the
arithmetic behind `reserve.Plan`, on `NodeView`s and plain numbers (its sweeps ask it for
every node that room comes back to, so it builds nothing it need not). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduling.decisions.types import NodeAllocation, NodeView

# A reserved node as it will be at its reservation's start, the reservation holding its
# part: free CPUs, free memory, the free GPU indices, and whether it is up.
Left = tuple[int, int, tuple[int, ...], bool]


def left_at(v: NodeView) -> Left:
    """What is free on `v`, as a `Left`."""
    gpus = v.free_gpus if v.free_gpus is not None else tuple(range(v.gpus))
    return (free_cpus_of(v), free_memory_of(v), gpus, v.available)


def less(left: Left, a: NodeAllocation) -> Left:
    """`left` once `a` holds room on it."""
    cpus, memory, gpus, up = left
    if a.gpu_indices:
        gpus = tuple(i for i in gpus if i not in a.gpu_indices)
    return (cpus - a.cpus, memory - a.memory_mib, gpus, up)


def intersect(a: NodeView, b: Left) -> NodeView:
    """What is free on a node both now (`a`) and at a reservation's start (`b`)."""
    mine = a.free_gpus if a.free_gpus is not None else tuple(range(a.gpus))
    if len(mine):
        theirs = set(b[2])
        mine = tuple(i for i in mine if i in theirs)
    return view_of(
        a, min(free_cpus_of(a), b[0]), min(free_memory_of(a), b[1]), mine, a.available and b[3]
    )


def free_cpus_of(v: NodeView) -> int:
    """Its free CPUs (all of them where nothing is counted yet)."""
    return v.cpus if v.free_cpus is None else v.free_cpus


def free_memory_of(v: NodeView) -> int:
    """Its free memory in MiB (all of it where nothing is counted yet)."""
    return v.memory_mib if v.free_memory_mib is None else v.free_memory_mib


def view_of(
    v: NodeView, cpus: int, memory: int, gpus: tuple[int, ...], available: bool
) -> NodeView:
    """`v` with these free CPUs, memory and GPUs, up or not."""
    return NodeView(
        v.name,
        v.cpus,
        v.memory_mib,
        v.gpus,
        cpus,
        memory,
        gpus,
        v.gpu_model,
        v.switch,
        available,
        v.available_until,
    )


def per_node(allocations: Iterable[NodeAllocation]) -> dict[str, tuple[int, int, frozenset]]:
    """The CPUs, memory and GPU indices `allocations` hold on each node, together."""
    out: dict[str, tuple[int, int, frozenset]] = {}
    for a in allocations:
        cpus, memory, gpus = out.get(a.node, (0, 0, frozenset()))
        out[a.node] = (cpus + a.cpus, memory + a.memory_mib, gpus | set(a.gpu_indices))
    return out


def together(
    holds: Sequence[dict[str, tuple[int, int, frozenset]]],
) -> dict[str, tuple[int, int, frozenset]]:
    if len(holds) == 1:
        return holds[0]
    out: dict[str, tuple[int, int, frozenset]] = {}
    for hold in holds:
        for name, (cpus, memory, gpus) in hold.items():
            c, m, g = out.get(name, (0, 0, frozenset()))
            out[name] = (c + cpus, m + memory, g | gpus)
    return out


def give_all(view: NodeView, allocations: Sequence[NodeAllocation]) -> NodeView:
    """`view` once every one of `allocations` has ended."""
    gpus = view.free_gpus if view.free_gpus is not None else tuple(range(view.gpus))
    cpus, memory = free_cpus_of(view), free_memory_of(view)
    indices: list[int] = []
    for a in allocations:
        cpus += a.cpus
        memory += a.memory_mib
        indices += a.gpu_indices
    if indices:
        gpus = tuple(sorted({*gpus, *indices}))
    return view_of(view, cpus, memory, gpus, view.available)


def take_all(view: NodeView, cpus: int, memory: int, indices: frozenset) -> NodeView:
    """`view` once `cpus`, `memory` and the GPUs `indices` are held on it (its
    allocations on it, taken together)."""
    gpus = view.free_gpus if view.free_gpus is not None else tuple(range(view.gpus))
    if indices:
        gpus = tuple(i for i in gpus if i not in indices)
    return view_of(
        view, free_cpus_of(view) - cpus, free_memory_of(view) - memory, gpus, view.available
    )
