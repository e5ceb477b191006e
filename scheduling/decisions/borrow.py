"""Backfill across pools: a CPU job that waits in its own pool runs on another pool's idle
cores, where the site allows it (docs/policy.md, "Backfill across pools").

After its own pool's pass has left it waiting, a job of a pool that may borrow (a
`Borrowing` rule, switched on per pair of pools by a platform admin) is placed on the
lending pool's free cores and memory, only if

- it asks for no GPU (it never holds one there);
- its walltime (not a prediction: a prediction may be wrong, and the lender's work must
  not pay for it) ends before every reservation of the lending pool on the nodes it uses,
  or leaves that reservation's room intact (`Plan.constrain` of the lending pool);
- it leaves each node's free GPUs usable: per free GPU the node keeps `cpus_per_free_gpu`
  cores (and memory in the node's own proportion) that a borrowed job may not take.

It takes exactly the cores it asks for (no oversubscription of another pool's node, and
never a whole node). The caller starts it like any other start: it counts against its own
queue's quotas and concurrency, and is metered as CPU work of its own queue. Pure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduling.decisions.place import PACK, free_view, place
from scheduling.decisions.reserve import RESERVED_AT, Plan, node_range
from scheduling.decisions.schedule import Decision, Start, Wait, WaitingJob
from scheduling.decisions.types import NodeAllocation, NodeView, Placement


@dataclass(frozen=True, slots=True)
class Borrowing:
    """Jobs of pool `borrower` may run on the idle cores of pool `lender`'s nodes.

    `cpus_per_free_gpu`: the cores a node keeps for each of its free GPUs (None: its own
    cores per GPU, so that only what its GPUs could not use anyway is lent)."""

    borrower: str
    lender: str
    cpus_per_free_gpu: int | None = None

    def kept(self, node: NodeView) -> tuple[int, int]:
        """The cores and memory `node` keeps for its free GPUs."""
        free = len(node.free_gpus) if node.free_gpus is not None else node.gpus
        if not free or not node.available:
            return 0, 0
        per_gpu = (
            node.cpus // node.gpus if self.cpus_per_free_gpu is None else self.cpus_per_free_gpu
        )
        cpus = min(node.cpus, per_gpu * free)
        return cpus, node.memory_mib * cpus // max(1, node.cpus)


@dataclass(frozen=True, slots=True)
class Borrowed(Start):
    """A start on another pool's nodes: `pool` lends them until `until` (its walltime's end);
    `placement.note` says so in words."""

    pool: str = ""
    until: float = 0.0


def lendable(node: NodeView, rule: Borrowing) -> NodeView:
    """What of `node` a borrowed job may use: its free cores and memory less what its free
    GPUs keep, and no GPU."""
    cpus, memory = rule.kept(node)
    free_cpus = node.cpus if node.free_cpus is None else node.free_cpus
    free_memory = node.memory_mib if node.free_memory_mib is None else node.free_memory_mib
    return dataclasses.replace(
        node,
        free_cpus=free_cpus - cpus,
        free_memory_mib=free_memory - memory,
        free_gpus=(),
    )


def describe(placement: Placement, pool: str, until: float) -> str:
    """`backfilled on gpu007's idle cores (pool gpu-train) until 2026-01-05 14:20 UTC`."""
    nodes = tuple(dict.fromkeys(a.node for a in placement.allocations))
    when = datetime.fromtimestamp(until, tz=UTC).strftime(RESERVED_AT)
    return f"backfilled on {node_range(nodes)}'s idle cores (pool {pool}) until {when}"


def borrow_pass(
    waiting: Sequence[WaitingJob],
    *,
    rules: Sequence[Borrowing],
    views: Mapping[str, Sequence[NodeView]],
    plans: Mapping[str, Plan],
    running: Mapping[str, int],
    now: float,
) -> list[Borrowed | Wait]:
    """Decide, in priority then submit order, the jobs their own pools' pass left waiting.

    `views`: each lending pool's free views now (after its own pass's starts); `plans`: its
    reservations (absent: none), which each start here joins (`Plan.start`); `running`: the
    jobs running per queue. A job of no borrowing pool, one asking for GPUs, or one whose
    queue runs its maximum gets no decision; one that could borrow but finds no room gets
    a `Wait` whose reason says why (to add to its own pool's reason).
    """
    free = {pool: {v.name: v for v in vs} for pool, vs in views.items()}
    per_queue = Counter(running)
    lenders: dict[str, list[Borrowing]] = {}
    for rule in rules:
        if rule.lender != rule.borrower and rule.lender in free:
            lenders.setdefault(rule.borrower, []).append(rule)
    decisions: list[Borrowed | Wait] = []
    for job in sorted(waiting, key=lambda j: (-j.priority, j.seq)):
        mine = lenders.get(job.queue.pool)
        r = job.spec.resources
        if not mine or r.gpus or r.gpu_type:
            continue
        queue = job.queue
        if queue.max_concurrency is not None and per_queue[queue.name] >= queue.max_concurrency:
            continue
        names = ", ".join(rule.lender for rule in mine)
        walltime = job.spec.walltime_s
        if not walltime:
            why = f"not on the idle cores of {names}: only work with a walltime borrows them"
            decisions.append(Wait(job.key, why))
            continue
        until = now + walltime
        # Its own cores, no more: never a whole node, never another pool's oversubscription.
        as_borrowed = dataclasses.replace(queue, allocation=PACK, cpu_oversubscription=1)
        for rule in mine:
            room = list(free[rule.lender].values())
            plan = plans.get(rule.lender)
            if plan is not None:
                room = plan.constrain(room, until)
            placement = place(job.spec, as_borrowed, [lendable(v, rule) for v in room], now=now)
            if placement is None:
                continue
            said = describe(placement, rule.lender, until)
            placement = Placement(
                placement.allocations, "; ".join(filter(None, [said, placement.note]))
            )
            if plan is not None:
                plan.start(placement, until)
            for a in placement.allocations:
                free[rule.lender][a.node] = _take(free[rule.lender][a.node], a)
            per_queue[queue.name] += 1
            decisions.append(Borrowed(job.key, placement, rule.lender, until))
            break
        else:
            why = (
                f"not on the idle cores of {names}: none holds it until its walltime ends, "
                "beside their reservations and their free GPUs' share"
            )
            decisions.append(Wait(job.key, why))
    return decisions


def borrow_after(
    waiting: Sequence[WaitingJob],
    decisions: Sequence[Decision],
    *,
    rules: Sequence[Borrowing],
    pools: Mapping[str, Sequence[NodeView]],
    allocations: Mapping[str, Sequence[NodeAllocation]],
    running: Mapping[str, int],
    now: float,
    plans: Mapping[str, Plan],
    drained: Mapping[str, str] | AbstractSet[str] = frozenset(),
) -> list[Decision]:
    """One `schedule_pass`'s `decisions` over `waiting` (on `pools`, with `allocations`,
    `running` and `drained` as it had them, and the lending pools' `plans` it kept), with
    backfill across pools: a job it left waiting that may borrow gets a `Borrowed` start in
    place of its `Wait`, or its reason says why not too."""
    if not rules:
        return list(decisions)
    jobs = {j.key: j for j in waiting}
    booked: dict[str, list[NodeAllocation]] = defaultdict(list)
    for name, held in allocations.items():
        booked[name].extend(held)
    per_queue = Counter(running)
    for d in decisions:
        if isinstance(d, Start):
            per_queue[jobs[d.key].queue.name] += 1
            for a in d.placement.allocations:
                booked[a.node].append(a)
    views = {
        rule.lender: [
            free_view(
                dataclasses.replace(n, available=False) if n.name in drained else n, booked[n.name]
            )
            for n in pools.get(rule.lender, ())
        ]
        for rule in rules
    }
    waits = [jobs[d.key] for d in decisions if isinstance(d, Wait)]
    more = {
        d.key: d
        for d in borrow_pass(
            waits, rules=rules, views=views, plans=plans, running=per_queue, now=now
        )
    }
    out: list[Decision] = []
    for d in decisions:
        extra = more.get(d.key)
        if isinstance(extra, Borrowed):
            out.append(extra)
        elif extra is not None and isinstance(d, Wait):
            out.append(dataclasses.replace(d, why=f"{d.reason}; {extra.reason}"))
        else:
            out.append(d)
    return out


def _take(view: NodeView, a: NodeAllocation) -> NodeView:
    cpus = view.cpus if view.free_cpus is None else view.free_cpus
    memory = view.memory_mib if view.free_memory_mib is None else view.free_memory_mib
    return dataclasses.replace(view, free_cpus=cpus - a.cpus, free_memory_mib=memory - a.memory_mib)
