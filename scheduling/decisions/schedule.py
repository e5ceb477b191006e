"""One scheduling pass: which waiting jobs start now, where, and why the others wait.

The local backend runs this pass under its lock whenever capacity may have changed; the
simulator runs it at every event. Jobs are taken in priority then submit order; a job that
does not fit does not block the smaller ones behind it (backfill), but where running work's
planned ends are known the first ones get a reservation that those behind must leave intact
(`reserve.Plan`). Placement itself is
`place()`, which applies the queue's policy (whole-node, pack, CPU oversubscription).

The pass decides only; the caller carries the decisions out. It assumes every `Start` it
returns succeeds: a start that fails leaves its capacity idle until the next pass.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Generic, TypeVar

from scheduling.decisions.order import OVERDUE_VALUE
from scheduling.decisions.place import cpu_ratio, free_view, place, usable_cpus
from scheduling.decisions.reserve import RESERVED_JOBS, Busy, Plan, Reservation
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
    runtime_s: float | None = None  # its planned runtime (a prediction); None: its walltime

    @property
    def planned_s(self) -> float | None:
        """How long it is planned to run: its prediction, else its walltime (None: unknown)."""
        return self.runtime_s if self.runtime_s is not None else self.spec.walltime_s


@dataclass(frozen=True, slots=True)
class Start:
    key: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Wait:
    key: str
    # Why, or what works it out when `reason` is read: a pass decides many waits whose
    # words nobody reads (the simulator's), and a reservation's take a while to write.
    why: str | Callable[[], str]
    reserved: Reservation | None = None  # room held for it from a later time

    @property
    def reason(self) -> str:
        return self.why if isinstance(self.why, str) else self.why()


@dataclass(frozen=True, slots=True)
class Fail:
    """The job can never start: fail it with `reason`."""

    key: str
    reason: str


Decision = Start | Wait | Fail


T = TypeVar("T")


class _Once(Generic[T]):
    """`work()`'s answer, worked out when first asked. Not `functools.cache`: a pass makes one
    per request that waits (about 220,000 in the simulator's 100,000-job run), and wrapping a
    callable in `functools.cache` costs 9.6 us to this class's 0.8 us."""

    __slots__ = ("_work", "_answer")

    def __init__(self, work: Callable[[], T]) -> None:
        self._work: Callable[[], T] | None = work
        self._answer: T | None = None

    def __call__(self) -> T:
        if self._work is not None:
            self._answer, self._work = self._work(), None
        return self._answer  # type: ignore[return-value]


def schedule_pass(
    waiting: Sequence[WaitingJob],
    *,
    pools: Mapping[str, Sequence[NodeView]],
    allocations: Mapping[str, Sequence[NodeAllocation]],
    running: Mapping[str, int],
    drained: Mapping[str, str] | AbstractSet[str] = frozenset(),
    sandbox_missing: str | None = None,
    now: float | None = None,
    rooms: Mapping[str, PoolRoom] | None = None,
    busy: Iterable[Busy] | Callable[[], Iterable[Busy]] | None = None,
    reserve: int = RESERVED_JOBS,
    plans: Mapping[str, Plan] | None = None,
    backfill: str = "priority",
) -> list[Decision]:
    """Decide every waiting job, in the order they are considered.

    `pools` maps a pool name to its nodes ("" holds nodes for queues whose pool is not
    listed); `allocations` the live allocations by node name; `running` the jobs running per
    queue (for `max_concurrency`); `drained` the names of nodes taken out of service;
    `sandbox_missing` the reason a sandboxed job cannot start, when no sandbox is available;
    `now` the time, for nodes lent until a time (docs/capacity.md); `rooms`, when the caller
    keeps a pool's free views current (the simulator): its `PoolRoom`, which the pass then
    places on and updates as it starts jobs.

    With `busy` (the running work with its planned ends; `now` then required), the first
    `reserve` jobs of each pool that cannot start get a reservation at the earliest planned
    end that frees room for them, and a job behind them starts only where it leaves every
    reservation intact (docs/policy.md, "Reservations"); a job past its queue's bound on
    waiting (`order.OVERDUE_VALUE`) comes first and gets one beside those. `plans`, when the
    caller keeps a pool's reservations across calls (the simulator's batches): its `Plan`.
    Without either the pass backfills with no reservation.
    """
    booked: dict[str, list[NodeAllocation]] = {}  # nodes this pass placed on: all they hold
    # Jobs this pass started per queue, beside `running` (a dict, not a Counter: making a
    # Counter costs 1 us, and the simulator makes a pass per batch of jobs it offers).
    started: dict[str, int] = {}
    decisions: list[Decision] = []
    # Per pool, once per pass: whether a request could ever fit (the pool emptied, every
    # node up), and the free views now, kept current as jobs are placed.
    ever: dict[str, dict[tuple, bool]] = {}
    ideal: dict[str, list[NodeView]] = {}
    base: dict[str, dict[str, NodeView]] = {}
    room: dict[str, PoolRoom] = {}
    reasons: dict[tuple, Callable[[], str]] = {}
    plan_of: dict[str, Plan] = {}
    downs: dict[str, Callable[[], list[str]]] = {}  # pool → its nodes drained or down
    failed_at: dict[tuple, tuple[float, float]] = {}  # request → (end, walltime) that failed
    # request → the shortest planned runtime for which no reservation could be made (a
    # longer one of the same request meets more in its window: none either)
    unreservable: dict[tuple, float] = {}
    deferred: list[WaitingJob] = []
    # Per pool, the jobs past their queue's bound on waiting: each gets a reservation of its
    # own beside the `reserve` first (they come first in the order), so none is passed.
    overdue_in: dict[str, int] = {}
    for job in waiting:
        if job.priority >= OVERDUE_VALUE:
            pool = job.queue.pool if job.queue.pool in pools else ""
            overdue_in[pool] = overdue_in.get(pool, 0) + 1

    def in_order():
        """Priority order; with `backfill="shortest"`, a job whose pool's reservations are all
        made waits for the end, where such jobs go shortest planned runtime first."""
        for job in sorted(waiting, key=lambda j: (-j.priority, j.seq)):
            if backfill == "shortest":
                pool = job.queue.pool if job.queue.pool in pools else ""
                plan = plan_of.get(pool) or (plans or {}).get(pool)
                if plan is not None and plan.full and plan.held_for(job.key) is None:
                    deferred.append(job)
                    continue
            yield job
        yield from sorted(deferred, key=lambda j: (_planned(j), -j.priority, j.seq))

    for job in in_order():
        queue = job.queue
        if job.sandboxed and sandbox_missing:
            # Never fall back to running an agent/sandbox task without its sandbox.
            decisions.append(Fail(job.key, sandbox_missing))
            continue
        pool = queue.pool if queue.pool in pools else ""
        nodes = pools.get(pool, ())
        if pool not in ever:
            ideal[pool], ever[pool] = _ideal(nodes)
        r = job.spec.resources
        shape = (
            queue.name,
            queue.allocation,
            queue.cpu_oversubscription,
            r.cpus,
            r.gpus,
            r.memory_mib,
            r.nodes,
            r.gpu_type,
        )
        fits = ever[pool].get(shape)
        if fits is None:
            fits = ever[pool][shape] = place(job.spec, queue, ideal[pool]) is not None
        if not fits:
            decisions.append(Fail(job.key, never_fits(job, nodes)))
            continue
        if (
            queue.max_concurrency is not None
            and running.get(queue.name, 0) + started.get(queue.name, 0) >= queue.max_concurrency
        ):
            reason = f"queue {queue.name} runs its maximum of {queue.max_concurrency} jobs"
            decisions.append(Wait(job.key, reason))
            continue
        if pool not in room:
            if rooms is not None and pool in rooms:
                room[pool] = rooms[pool]
            else:
                views = {
                    n.name: free_view(
                        dataclasses.replace(n, available=False) if n.name in drained else n,
                        allocations.get(n.name, ()),
                    )
                    for n in nodes
                }
                room[pool] = PoolRoom(views)
        free = room[pool]
        plan = plan_of.get(pool)
        if plan is None and (plans is not None and pool in plans or busy is not None):
            plan = plan_of[pool] = (plans or {}).get(pool) or Plan(
                nodes, busy or (), now=now or 0.0, reserve=reserve, drained=drained
            )
            plan.reserve = max(plan.reserve, reserve + overdue_in.get(pool, 0))
        planned = job.planned_s
        ends = None if planned is None or now is None else now + planned
        placement = None
        mine = plan.held_for(job.key) if plan is not None and plan.reservations else None
        if plan is not None and mine is not None:
            # Reserved by an earlier pass: it starts now, or keeps its reservation.
            own = plan.constrain(free.listed(), ends, own=job.key)
            placement = place(job.spec, queue, own, now=now)
            if placement is None:
                plan.blocked.add(job.key)
                decisions.append(Wait(job.key, _reserved_reason(mine, job), mine))
                continue
            plan.release(job.key)
        # A job of this request that ends no later (and whose walltime is no longer: lent
        # nodes) found no room already: room only shrinks in a pass, and a later end meets
        # more reservations.
        end_key = (math.inf if ends is None else ends, job.spec.walltime_s or math.inf)
        before = failed_at.get(shape)
        late = (
            placement is None
            and before is not None
            and end_key[0] >= before[0]
            and end_key[1] >= before[1]
        )
        if late:
            if before[0] > -math.inf and plan is not None:  # type: ignore[index]
                plan.passed.add(job.key)
        elif placement is None and free.may_fit(job.spec, cpu_ratio(queue)):
            listed = free.listed()
            cpus = gpus = -1  # what the reservations leave in all; -1: none applies
            if plan is not None:
                cpus, gpus = plan.totals(listed, ends, cpu_ratio(queue))
            r = job.spec.resources
            if cpus < 0:
                placement = place(job.spec, queue, listed, now=now)
            elif r.cpus <= cpus and r.gpus <= gpus and plan is not None:
                placement = place(job.spec, queue, plan.constrain(listed, ends), now=now)
            if placement is None and cpus >= 0 and plan is not None:
                plan.passed.add(job.key)  # room enough now, but not beside the reservations
        if placement is None:
            if not late:
                passed = plan is not None and job.key in plan.passed
                failed_at[shape] = (end_key[0] if passed else -math.inf, end_key[1])
            if plan is not None and plan.full:
                # A reservation an earlier pass made for a job behind this one moves to it.
                plan.yield_to(job.key)
            if plan is not None:
                plan.blocked.add(job.key)
            span = _planned(job)
            if (
                plan is not None
                and not plan.full
                and span < unreservable.get(shape, math.inf)  # a shorter one found none
            ):
                reservation = plan.make(job.key, job.spec, queue, planned, free.views)
                if reservation is None:
                    unreservable[shape] = span
                else:
                    decisions.append(Wait(job.key, _reserved_reason(reservation, job), reservation))
                    continue
            if shape not in reasons:  # the same words for the same request
                if pool not in downs:
                    downs[pool] = _Once(_down_names(nodes, frozenset(drained)))
                # Written once, when first read: the simulator reads none.
                reasons[shape] = _Once(functools.partial(waiting_reason, job, downs[pool]))
            decisions.append(Wait(job.key, reasons[shape]))
            continue
        if plan is not None:
            plan.start(placement, ends)
        decisions.append(Start(job.key, placement))
        for a in placement.allocations:
            if a.node not in booked:
                booked[a.node] = list(allocations.get(a.node, ()))
            booked[a.node].append(a)
            if pool not in base:
                base[pool] = {n.name: n for n in nodes}
            node = base[pool][a.node]
            if node.name in drained:
                node = dataclasses.replace(node, available=False)
            free.update(free_view(node, booked[a.node]))
        started[queue.name] = started.get(queue.name, 0) + 1
    return decisions


# Pools' emptied views and what could ever fit on them, by the pool's nodes: a pass asks
# this for every waiting job, and a pool's nodes rarely change. Bounded; a pure memo.
_IDEAL: dict[tuple[NodeView, ...], tuple[list[NodeView], dict[tuple, bool]]] = {}
_LAST_IDEAL: dict[int, tuple] = {}  # id → (the tuple itself, kept alive; its entry)


def _ideal(nodes: Sequence[NodeView]) -> tuple[list[NodeView], dict[tuple, bool]]:
    last = _LAST_IDEAL.get(id(nodes))
    if last is not None and last[0] is nodes:  # the very same sequence as last time
        return last[1]
    key = tuple(nodes)
    hit = _IDEAL.get(key)
    if hit is None:
        if len(_IDEAL) >= 32:
            _IDEAL.clear()
        empty = [
            free_view(dataclasses.replace(n, available=True, available_until=None), ())
            for n in nodes
        ]
        hit = _IDEAL[key] = (empty, {})
    if isinstance(nodes, tuple):  # immutable: safe to know again by identity
        if len(_LAST_IDEAL) >= 32:
            _LAST_IDEAL.clear()
        _LAST_IDEAL[id(nodes)] = (nodes, hit)
    return hit


def _planned(job: WaitingJob) -> float:
    planned = job.planned_s
    return math.inf if planned is None else planned


class PoolRoom:
    """A pool's free views, and their total free CPUs (per oversubscription ratio) and GPUs:
    a request above a total cannot fit, and place() need not be asked. `update` a node's
    view as work starts or ends on it; the totals follow."""

    def __init__(self, views: dict[str, NodeView]) -> None:
        self.views = views
        self._cpus: dict[int, dict[str, int]] = {}
        self._cpu_total: dict[int, int] = {}
        self.gpus = sum(len(v.free_gpus or ()) for v in views.values() if v.available)
        self._listed: list[NodeView] | None = None

    def cpus(self, ratio: int) -> int:
        """Free CPUs in all, for a queue with oversubscription `ratio`."""
        if ratio not in self._cpus:
            per = {n: max(0, usable_cpus(v, ratio)) for n, v in self.views.items() if v.available}
            self._cpus[ratio], self._cpu_total[ratio] = per, sum(per.values())
        return self._cpu_total[ratio]

    def listed(self) -> list[NodeView]:
        """The views as a list, the same list until one changes."""
        if self._listed is None:
            self._listed = list(self.views.values())
        return self._listed

    def may_fit(self, spec: TaskSpec, ratio: int) -> bool:
        return spec.resources.gpus <= self.gpus and spec.resources.cpus <= self.cpus(ratio)

    def update(self, view: NodeView) -> None:
        old = self.views[view.name]
        self.views[view.name] = view
        self._listed = None
        # An unavailable node counts for nothing, before or after.
        self.gpus += (len(view.free_gpus or ()) if view.available else 0) - (
            len(old.free_gpus or ()) if old.available else 0
        )
        for ratio, per in self._cpus.items():
            new = max(0, usable_cpus(view, ratio)) if view.available else 0
            self._cpu_total[ratio] += new - per.get(view.name, 0)
            per[view.name] = new


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


def waiting_reason(job: WaitingJob, down: Sequence[str] | Callable[[], Sequence[str]]) -> str:
    """Why `job` waits for room; `down`: the names of its pool's nodes drained or down (or
    what lists them)."""
    reason = f"waiting for resources in pool {job.queue.pool} ({asked(job)})"
    names = down() if callable(down) else down
    if names:
        reason += f"; drained or down: {', '.join(names)}"
    return reason


def _down_names(nodes: Sequence[NodeView], drained: AbstractSet[str]) -> Callable[[], list[str]]:
    return lambda: sorted(n.name for n in nodes if n.name in drained or not n.available)


def _reserved_reason(reservation: Reservation, job: WaitingJob) -> Callable[[], str]:
    """`reserved from … on … (what it asks)`, when read."""
    return lambda: f"{reservation.describe()} ({asked(job)})"
