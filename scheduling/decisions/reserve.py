"""Reservations: room held for the first jobs of a pool that cannot start now.

When running work's planned ends are known (its start plus its predicted runtime, capped by
its walltime; or its walltime), the first job of a pool that cannot start gets a
reservation: the earliest of those ends at which it fits, on named nodes. A job behind it
starts now only if it leaves the reservation intact: it ends before the reservation begins,
or it fits beside the reserved job on the reserved nodes (what EASY backfilling does, per
node rather than by counting processors). `Plan` keeps a pool's reservations through one
pass (docs/policy.md, "Reservations"). Pure.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime

from scheduling.decisions.place import cpu_ratio, place, usable_cpus
from scheduling.decisions.types import NodeAllocation, NodeView, Placement, QueuePolicy
from scheduling.spec import TaskSpec


@dataclass(frozen=True, slots=True)
class Busy:
    """Room held from now until `ends_at` (epoch seconds; None: unknown, it never frees)."""

    allocation: NodeAllocation
    ends_at: float | None


@dataclass(frozen=True, slots=True)
class Reservation:
    key: str
    at: float  # when it may start, epoch seconds
    ends: float | None  # at + its planned runtime; None: no walltime
    allocations: tuple[NodeAllocation, ...]

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(a.node for a in self.allocations))

    def describe(self) -> str:
        """`reserved from 2026-01-05 14:20 UTC on gpu007-gpu010`."""
        when = datetime.fromtimestamp(self.at, tz=UTC).strftime(RESERVED_AT)
        return f"{RESERVED_FROM}{when} on {_node_range(self.nodes)}"


RESERVED_FROM = "reserved from "
RESERVED_AT = "%Y-%m-%d %H:%M UTC"


def reserved_at(reason: str) -> datetime | None:
    """The start of the reservation a waiting job's reason names (`Reservation.describe`),
    or None when the reason names none."""
    if not reason.startswith(RESERVED_FROM):
        return None
    stamp = reason[len(RESERVED_FROM) :][: len("2026-01-05 14:20 UTC")]
    try:
        return datetime.strptime(stamp, RESERVED_AT).replace(tzinfo=UTC)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def _node_range(names: tuple[str, ...]) -> str:
    """`node_range`, remembered: a pool's reservation is made again at every pass that freed
    room, mostly on the same nodes."""
    return node_range(names)


def node_range(names: Sequence[str]) -> str:
    """`gpu007-gpu010` for a run of consecutive names, else the names joined by commas."""
    names = sorted(names)
    if len(names) > 2:
        stem = names[0].rstrip("0123456789")
        digits = [n[len(stem) :] for n in names]
        if all(n.startswith(stem) and d.isdigit() for n, d in zip(names, digits, strict=True)):
            numbers = [int(d) for d in digits]
            if numbers == list(range(numbers[0], numbers[0] + len(numbers))):
                return f"{names[0]}-{names[-1]}"
    return ", ".join(names)


def _intersect(a: NodeView, b: NodeView) -> NodeView:
    """What is free on a node both now (`a`) and at a reservation's start (`b`)."""
    mine = a.free_gpus if a.free_gpus is not None else tuple(range(a.gpus))
    if b.free_gpus is not None and len(mine):
        theirs = set(b.free_gpus)
        mine = tuple(i for i in mine if i in theirs)
    return _view(
        a,
        min(_cpus(a), _cpus(b)),
        min(_memory(a), _memory(b)),
        mine,
        a.available and b.available,
    )


def _cpus(v: NodeView) -> int:
    return v.cpus if v.free_cpus is None else v.free_cpus


def _memory(v: NodeView) -> int:
    return v.memory_mib if v.free_memory_mib is None else v.free_memory_mib


# How many of a pool's jobs that cannot start get a reservation (1 would be EASY): the first
# two. Against one, on the SWF model trace, the longest waits fall from 1.45x, 1.26x and
# 1.00x EASY's to 1.28x, 1.01x and 1.00x, and the mean bounded slowdown at loads 0.85 and
# 0.7 from 0.77x and 0.81x to 0.66x and 0.80x EASY's (0.38x to 0.41x at the trace's own);
# docs/simulation.md.
RESERVED_JOBS = 2


class Plan:
    """A pool's reservations through one scheduling pass.

    `busy` is the running work with its planned ends (or a callable giving it, asked only
    when a reservation must be made); `reserve` how many jobs that cannot start get one (1:
    EASY; more: conservative backfilling of the first few). `start` records each job the
    pass starts, with its planned end, so later reservations and checks see it.
    """

    def __init__(
        self,
        nodes: Sequence[NodeView],
        busy: Iterable[Busy] | Callable[[], Iterable[Busy]],
        *,
        now: float,
        reserve: int = RESERVED_JOBS,
        drained: Mapping[str, str] | AbstractSet[str] = frozenset(),
    ) -> None:
        self.nodes = {
            n.name: dataclasses.replace(n, available=False) if n.name in drained else n
            for n in nodes
        }
        self._busy_source = busy
        self._busy: list[Busy] | None = None
        self._started: list[Busy] = []  # what this pass started, with its planned ends
        self.now = now
        self.reserve = reserve
        self.reservations: list[Reservation] = []
        self.passed: set[str] = set()  # jobs that fit now but not beside the reservations
        # The jobs this pass found no room for so far, in its order; whether the pass offers
        # every waiting job (a caller offering only new arrivals against the last pass's
        # reservations says False, and then no reservation moves).
        self.blocked: set[str] = set()
        self.whole_pass = True
        # Per reservation, its nodes as they will be free at its start once it holds them.
        self._shadows: list[dict[str, NodeView]] = []
        # constrain()'s answers for the views it was last given, by the reservations that
        # applied; a start changes both, and clears them.
        self._constrained: dict[tuple, tuple[list[NodeView], tuple[list[NodeView], int, int]]] = {}

    @property
    def full(self) -> bool:
        return len(self.reservations) >= self.reserve

    def _running(self) -> list[Busy]:
        if self._busy is None:
            source = self._busy_source
            rows = source() if callable(source) else source
            self._busy = [b for b in rows if b.allocation.node in self.nodes]
        return self._busy

    # -- starting now ---------------------------------------------------------------------

    def held_for(self, key: str) -> Reservation | None:
        return next((r for r in self.reservations if r.key == key), None)

    def release(self, key: str) -> None:
        """The job `key` starts (or leaves): its reservation goes."""
        for i, r in enumerate(self.reservations):
            if r.key == key:
                del self.reservations[i], self._shadows[i]
                self._constrained.clear()
                return

    def yield_to(self, key: str) -> None:
        """The job `key` cannot start and every job ahead of it in this pass that could not
        either has been seen: a reservation an earlier pass made for a job not among them
        (one behind it now) goes, so that `key` may reserve instead. Only in a pass that
        offers every waiting job (`whole_pass`)."""
        if not self.whole_pass:
            return
        behind = [r.key for r in self.reservations if r.key not in self.blocked]
        if behind:
            self.release(behind[-1])

    def constrain(
        self, views: list[NodeView], ends: float | None, *, own: str | None = None
    ) -> list[NodeView]:
        """The free views a job ending at `ends` may use: on each reserved node whose
        reservation begins before it ends, only what the reservation leaves free (the job's
        `own` reservation aside)."""
        return self.room(views, ends, own=own)[0]

    def room(
        self, views: list[NodeView], ends: float | None, ratio: int = 1, *, own: str | None = None
    ) -> tuple[list[NodeView], int, int]:
        """`constrain`'s views, and the CPUs (at oversubscription `ratio`) and GPUs they hold
        in all: a job asking more cannot fit, and `place()` need not be asked. The views are
        `views` itself where no reservation applies."""
        limit = math.inf if ends is None else ends
        active = tuple(i for i, r in enumerate(self.reservations) if r.at < limit and r.key != own)
        if not active:
            return views, -1, -1
        cached = self._constrained.get((active, ratio))
        if cached is not None and cached[0] is views:
            return cached[1]
        out, cpus, gpus = [], 0, 0
        for v in views:
            for i in active:
                shadow = self._shadows[i]
                if v.name in shadow:
                    v = _intersect(v, shadow[v.name])
            out.append(v)
            if v.available:
                cpus += max(0, usable_cpus(v, ratio))
                gpus += len(v.free_gpus or ())
        answer = (out, cpus, gpus)
        self._constrained[(active, ratio)] = (views, answer)
        return answer

    def start(self, placement: Placement, ends: float | None) -> None:
        """A job starts now on `placement` until `ends`: it holds room in every reservation
        that begins before then."""
        self._started.extend(Busy(a, ends) for a in placement.allocations)
        self._constrained.clear()
        limit = math.inf if ends is None else ends
        for r, shadow in zip(self.reservations, self._shadows, strict=True):
            if r.at >= limit:
                continue
            for a in placement.allocations:
                if a.node in shadow:
                    shadow[a.node] = _take(shadow[a.node], a)

    # -- reserving ------------------------------------------------------------------------

    def make(
        self,
        key: str,
        spec: TaskSpec,
        queue: QueuePolicy,
        runtime_s: float | None,
        free: Mapping[str, NodeView],
    ) -> Reservation | None:
        """Reserve the earliest room for a job that cannot start now (`free`: the pool's
        free views now); None when no planned end frees enough (it waits on work with no
        walltime, or on nodes that are down).

        A sweep over the planned ends in time order: each end gives its room back to its
        node; `place()` is asked only where the free total could hold the job."""
        # What has ended by its plan holds nothing any more: drop it for good.
        self._busy = [b for b in self._running() if b.ends_at is None or b.ends_at > self.now]
        self._started = [b for b in self._started if b.ends_at is None or b.ends_at > self.now]
        running = self._busy + self._started
        ending = sorted((b for b in running if b.ends_at is not None), key=_end)
        end_times = [_end(b) for b in ending]  # the same order, read once
        views = {name: free[name] for name in self.nodes if name in free}
        ratio = cpu_ratio(queue)
        need_cpus, need_gpus = spec.resources.cpus, spec.resources.gpus
        # Free CPUs per node as ends give them back; the views follow only when place() is
        # asked (most ends leave too little room to ask it).
        free_cpus = {name: _cpus(v) for name, v in views.items()}
        extra = {name: v.cpus * (ratio - 1) for name, v in views.items()}
        up = {name for name, v in views.items() if v.available}
        cpus = sum(max(0, free_cpus[n] + extra[n]) for n in up)
        gpus = sum(len(views[n].free_gpus or ()) for n in up)
        given: dict[str, list[NodeAllocation]] = {}  # ended, not yet in `views`
        ends_of_reserved = {r.ends for r in self.reservations if r.ends is not None}
        i = 0
        for t in sorted({*end_times, *ends_of_reserved}):
            if t <= self.now:
                continue
            while i < len(ending) and end_times[i] <= t:
                a = ending[i].allocation
                i += 1
                if a.node not in views:
                    continue
                given.setdefault(a.node, []).append(a)
                if a.node in up:
                    before = max(0, free_cpus[a.node] + extra[a.node])
                    free_cpus[a.node] += a.cpus
                    cpus += max(0, free_cpus[a.node] + extra[a.node]) - before
                    gpus += len(a.gpu_indices)
                else:
                    free_cpus[a.node] += a.cpus
            if cpus < need_cpus or gpus < need_gpus:
                continue
            for name, allocations in given.items():
                for a in allocations:
                    views[name] = _give(views[name], a)
            given.clear()
            window_end = math.inf if runtime_s is None else t + runtime_s
            at_t = views
            overlapping = [
                r for r in self.reservations if r.at < window_end and (r.ends is None or r.ends > t)
            ]
            if overlapping:
                at_t = dict(views)
                for r in overlapping:
                    for a in r.allocations:
                        if a.node in at_t:
                            at_t[a.node] = _take(at_t[a.node], a)
            placement = place(spec, queue, list(at_t.values()), now=t)
            if placement is None:
                continue
            ends = None if runtime_s is None else t + runtime_s
            reservation = Reservation(key, t, ends, placement.allocations)
            shadow: dict[str, NodeView] = {}
            for a in placement.allocations:
                shadow[a.node] = _take(shadow.get(a.node, at_t[a.node]), a)
            self.reservations.append(reservation)
            self._shadows.append(shadow)
            self._constrained.clear()
            return reservation
        return None


def _end(b: Busy) -> float:
    return b.ends_at if b.ends_at is not None else math.inf


def _view(v: NodeView, cpus: int, memory: int, gpus: tuple[int, ...], available: bool) -> NodeView:
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


def _give(view: NodeView, a: NodeAllocation) -> NodeView:
    """`view` once `a` has ended."""
    gpus = view.free_gpus if view.free_gpus is not None else tuple(range(view.gpus))
    if a.gpu_indices:
        gpus = tuple(sorted({*gpus, *a.gpu_indices}))
    return _view(view, _cpus(view) + a.cpus, _memory(view) + a.memory_mib, gpus, view.available)


def _take(view: NodeView, a: NodeAllocation) -> NodeView:
    """`view` once `a` holds room on it."""
    gpus = view.free_gpus if view.free_gpus is not None else tuple(range(view.gpus))
    if a.gpu_indices:
        gpus = tuple(i for i in gpus if i not in a.gpu_indices)
    return _view(view, _cpus(view) - a.cpus, _memory(view) - a.memory_mib, gpus, view.available)
