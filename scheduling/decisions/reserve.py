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

from scheduling.decisions.noderoom import (
    Left,
    free_cpus_of,
    give_all,
    intersect,
    left_at,
    less,
    per_node,
    take_all,
    together,
)
from scheduling.decisions.place import cpu_ratio, place
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
        return f"{RESERVED_FROM}{_when(self.at)} on {_node_range(self.nodes)}"


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
def _when(at: float) -> str:
    """A reservation's start in its reason's words, remembered: a pool's reservations are
    described again at every pass that made them, mostly at the same times."""
    return datetime.fromtimestamp(at, tz=UTC).strftime(RESERVED_AT)


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


@dataclass(frozen=True, slots=True)
class Made:
    """A reservation as `Plan.make` made it, with everything that decided it: the job's
    request and planned runtime, the pool's nodes, the reservations made before it, the room
    still held at its start and what it left free there. A later plan asked to reserve for
    the same job, where all of that is the same and no earlier time fits, would make the
    same reservation: it takes this one (`Plan(made=...)`)."""

    reservation: Reservation
    spec: TaskSpec
    queue: QueuePolicy
    runtime_s: float | None
    nodes: tuple
    before: tuple
    held: frozenset  # the allocations still held at its start (by identity: `alive`)
    shadow: dict
    running: frozenset  # (allocation, planned end) of the work running when it was made
    alive: tuple  # that work, kept, so that no other allocation takes one's identity


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

    `made`: an earlier plan's reservations of this pool as they were made (`Plan.kept`),
    which `make` takes again where nothing that decided one has changed. Only for a caller
    whose `busy` holds every allocation on the pool's nodes (the simulator): the room at a
    reservation's start is then the nodes less what is still held then.
    """

    def __init__(
        self,
        nodes: Sequence[NodeView],
        busy: Iterable[Busy] | Callable[[], Iterable[Busy]],
        *,
        now: float,
        reserve: int = RESERVED_JOBS,
        drained: Mapping[str, str] | AbstractSet[str] = frozenset(),
        made: Mapping[str, Made] | None = None,
    ) -> None:
        self.nodes = {
            n.name: dataclasses.replace(n, available=False) if n.name in drained else n
            for n in nodes
        }
        self._busy_source = busy
        self._busy: list[Busy] | None = None
        self._started: list[Busy] = []  # what this pass started, with its planned ends
        # `_alive`'s answer, as of a time: (now, running, its pairs)
        self._alive_at: tuple[float, list[Busy], set] | None = None
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
        self._shadows: list[dict[str, Left]] = []
        # constrain()'s and totals()'s answers for the views they were last given, by the
        # reservations that applied (and the ratio); a start changes both, and clears them.
        self._constrained: dict[tuple, tuple[list[NodeView], list[NodeView]]] = {}
        self._totals: dict[tuple, tuple[list[NodeView], tuple[int, int]]] = {}
        # The reservations this plan made or took again, and an earlier plan's to take again.
        self.made: dict[str, Made] = {}
        self._earlier = made or {}
        self._node_key = tuple(self.nodes.values()) if made is not None else ()

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
                self._forget()
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

    def _active(self, ends: float | None, own: str | None) -> tuple[int, ...]:
        """The reservations a job ending at `ends` meets (the job's `own` aside)."""
        limit = math.inf if ends is None else ends
        return tuple([i for i, r in enumerate(self.reservations) if r.at < limit and r.key != own])

    def _forget(self) -> None:
        self._constrained.clear()
        self._totals.clear()

    def constrain(
        self, views: list[NodeView], ends: float | None, *, own: str | None = None
    ) -> list[NodeView]:
        """The free views a job ending at `ends` may use: on each reserved node whose
        reservation begins before it ends, only what the reservation leaves free (the job's
        `own` reservation aside). `views` itself where no reservation applies."""
        active = self._active(ends, own)
        if not active:
            return views
        cached = self._constrained.get(active)
        if cached is not None and cached[0] is views:
            return cached[1]
        shadows = [self._shadows[i] for i in active]
        out = []
        for v in views:
            for shadow in shadows:
                left = shadow.get(v.name)
                if left is not None:
                    v = intersect(v, left)
            out.append(v)
        self._constrained[active] = (views, out)
        return out

    def totals(
        self, views: list[NodeView], ends: float | None, ratio: int = 1, *, own: str | None = None
    ) -> tuple[int, int]:
        """The CPUs (at oversubscription `ratio`) and GPUs `constrain`'s views hold in all,
        without building them: a job asking more cannot fit, and `place()` need not be
        asked. (-1, -1) where no reservation applies."""
        active = self._active(ends, own)
        if not active:
            return -1, -1
        cached = self._totals.get((active, ratio))
        if cached is not None and cached[0] is views:
            return cached[1]
        shadows = [self._shadows[i] for i in active]
        cpus = gpus = 0
        for v in views:
            free, mine, up = free_cpus_of(v), v.free_gpus, v.available
            for shadow in shadows:
                left = shadow.get(v.name)
                if left is not None:  # as intersect()
                    if mine is None:
                        mine = tuple(range(v.gpus))
                    if len(mine):
                        theirs = set(left[2])
                        mine = tuple(i for i in mine if i in theirs)
                    free, up = min(free, left[0]), up and left[3]
            if up:
                cpus += max(0, free + v.cpus * (ratio - 1))
                gpus += len(mine or ())
        answer = (cpus, gpus)
        self._totals[(active, ratio)] = (views, answer)
        return answer

    def start(self, placement: Placement, ends: float | None) -> None:
        """A job starts now on `placement` until `ends`: it holds room in every reservation
        that begins before then."""
        self._started.extend(Busy(a, ends) for a in placement.allocations)
        self._alive_at = None
        self._forget()
        limit = math.inf if ends is None else ends
        for r, shadow in zip(self.reservations, self._shadows, strict=True):
            if r.at >= limit:
                continue
            for a in placement.allocations:
                if a.node in shadow:
                    shadow[a.node] = less(shadow[a.node], a)

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
        running, going = self._alive()
        prior = tuple((r.key, r.at, r.ends, r.allocations) for r in self.reservations)
        earlier = self._earlier.get(key)
        if earlier is not None and not (
            earlier.spec is spec
            and earlier.queue == queue
            and earlier.runtime_s == runtime_s
            and earlier.reservation.at > self.now
            and earlier.before == prior
            and earlier.nodes == self._node_key
            and earlier.held == _held_at(running, earlier.reservation.at)
        ):
            earlier = None
        if earlier is not None:
            # Whatever gave room back before its start when it was made still runs, to the
            # same planned end: room before then never grew, so no earlier time fits (a
            # fit needs room, and it found none); and the room then is as it was.
            now = self.now
            gone = earlier.running - going  # ended, or planned to end otherwise now
            if all(k[1] is not None and k[1] <= now for k in gone):
                return self._add(earlier, dict(earlier.shadow))
        ending = sorted((b for b in running if b.ends_at is not None), key=_end)
        end_times = [_end(b) for b in ending]  # the same order, read once
        views = {name: free[name] for name in self.nodes if name in free}
        ratio = cpu_ratio(queue)
        need_cpus, need_gpus = spec.resources.cpus, spec.resources.gpus
        # Free CPUs per node as ends give them back; the views follow only when place() is
        # asked (most ends leave too little room to ask it).
        free_cpus: dict[str, int] = {}
        extra: dict[str, int] = {}
        up: set[str] = set()
        cpus = gpus = 0
        for name, v in views.items():
            free_cpus[name] = free_cpus_of(v)
            extra[name] = v.cpus * (ratio - 1)
            if v.available:
                up.add(name)
                cpus += max(0, free_cpus[name] + extra[name])
                gpus += len(v.free_gpus or ())
        given: dict[str, list[NodeAllocation]] = {}  # ended, not yet in `views`
        ends_of_reserved = {r.ends for r in self.reservations if r.ends is not None}
        # What each reservation holds per node, its allocations taken together.
        holds = [per_node(r.allocations) for r in self.reservations]
        i, n = 0, len(ending)
        for t in sorted({*end_times, *ends_of_reserved}):
            if t <= self.now:
                continue
            while i < n and end_times[i] <= t:
                a = ending[i].allocation
                i += 1
                if a.node not in views:
                    continue
                given.setdefault(a.node, []).append(a)
                before = free_cpus[a.node] + extra[a.node]
                free_cpus[a.node] += a.cpus
                if a.node in up:
                    # what the node adds to the total: all of it, unless it was (and may
                    # still be) oversubscribed past its share
                    cpus += a.cpus if before >= 0 else max(0, before + a.cpus)
                    gpus += len(a.gpu_indices)
            if earlier is not None and t >= earlier.reservation.at:
                if t == earlier.reservation.at:
                    # Nothing earlier fits, and the room then is as it was: the same one.
                    return self._add(earlier, dict(earlier.shadow))
                earlier = None
            if cpus < need_cpus or gpus < need_gpus:
                continue
            window_end = math.inf if runtime_s is None else t + runtime_s
            overlapping = [
                holds[k]
                for k, r in enumerate(self.reservations)
                if r.at < window_end and (r.ends is None or r.ends > t)
            ]
            taken = together(overlapping)
            # The CPUs the reservations leave: a job asking more cannot fit, and neither the
            # views nor place() are needed.
            left = cpus
            for name, (held_cpus, _, _) in taken.items():
                if name in up:
                    room = free_cpus[name] + extra[name]
                    left += max(0, room - held_cpus) - max(0, room)
            if left < need_cpus:
                continue
            for name, allocations in given.items():
                views[name] = give_all(views[name], allocations)
            given.clear()
            at_t = views
            if taken:
                at_t = dict(views)
                for name, held in taken.items():
                    if name in at_t:
                        at_t[name] = take_all(at_t[name], *held)
            placement = place(spec, queue, list(at_t.values()), now=t)
            if placement is None:
                continue
            ends = None if runtime_s is None else t + runtime_s
            reservation = Reservation(key, t, ends, placement.allocations)
            shadow: dict[str, Left] = {}
            for a in placement.allocations:
                shadow[a.node] = less(shadow.get(a.node) or left_at(at_t[a.node]), a)
            if self._node_key:  # the caller takes reservations again (`made`)
                made = Made(
                    reservation,
                    spec,
                    queue,
                    runtime_s,
                    self._node_key,
                    prior,
                    _held_at(running, t),
                    dict(shadow),
                    frozenset((id(b.allocation), b.ends_at) for b in running),
                    tuple(running),
                )
                return self._add(made, shadow)
            self.reservations.append(reservation)
            self._shadows.append(shadow)
            self._forget()
            return reservation
        return None

    def _alive(self) -> tuple[list[Busy], set[tuple[int, float | None]]]:
        """The work that holds room after `now` (what has ended by its plan holds nothing any
        more: dropped for good), and its (allocation's identity, planned end) pairs; kept
        until a job starts or `now` moves."""
        if self._alive_at is None or self._alive_at[0] != self.now:
            now = self.now
            self._busy = [b for b in self._running() if b.ends_at is None or b.ends_at > now]
            self._started = [b for b in self._started if b.ends_at is None or b.ends_at > now]
            running = self._busy + self._started
            self._alive_at = (now, running, {(id(b.allocation), b.ends_at) for b in running})
        return self._alive_at[1], self._alive_at[2]

    def _add(self, made: Made, shadow: dict[str, Left]) -> Reservation:
        self.reservations.append(made.reservation)
        self._shadows.append(shadow)
        self.made[made.reservation.key] = made
        self._forget()
        return made.reservation

    def kept(self) -> dict[str, Made]:
        """The reservations this plan holds as they were made, for the next plan's `made`."""
        return {r.key: self.made[r.key] for r in self.reservations if r.key in self.made}


def _held_at(running: Iterable[Busy], t: float) -> frozenset[int]:
    """The allocations still held at `t` (the room then is the nodes less these), by
    identity: an allocation is one job's, never made again (a job started again gets new
    ones), and a plan's `Made` keeps those it names alive."""
    return frozenset(id(b.allocation) for b in running if b.ends_at is None or b.ends_at > t)


def _end(b: Busy) -> float:
    return b.ends_at if b.ends_at is not None else math.inf
