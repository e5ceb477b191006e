"""The state one simulated run shares between its event loop and its policy (no Django)."""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Sequence

from scheduling.decisions.place import free_view
from scheduling.decisions.schedule import PoolRoom
from scheduling.decisions.types import NodeAllocation, NodeView, Placement
from simulation.simulator.model import Outcome, Run, SimJob, Site, Span

# Event kinds, in the order they are handled within one moment: ends free room first.
# OUTLIVED: a running job reached its planned end (its prediction) and runs on.
END, FAIL, REPAIR, LEASE_END, LEASE_OPEN, ARRIVE, TICK, OUTLIVED = range(8)
WHOLE_SITE = "site"  # the baselines' single pool


class Sim:
    """The state one run shares between its loop and its policy."""

    def __init__(self, jobs: Sequence[SimJob], site: Site, policy: str) -> None:
        self.site, self.policy_name = site, policy
        self.run = Run(policy)
        self.jobs = {job.key: job for job in jobs}
        self.order = {job.key: i for i, job in enumerate(jobs)}  # submit order
        self.events: list[tuple[float, int, int, str, int]] = []
        self._tie = itertools.count()
        self.nodes: dict[str, NodeView] = {n.name: n for n in site.nodes}  # as they are now
        self.pool_of: dict[str, str] = {}  # node → the pool it serves now (see move)
        self._members: dict[str, list[str]] = {}
        self._pool_nodes: dict[str, tuple[NodeView, ...]] = {}
        self.down: set[str] = set()
        self.allocations: dict[str, list[NodeAllocation]] = {name: [] for name in self.nodes}
        self._views: dict[str, NodeView] = {}
        # Each pool's free views with their totals (`pool_room`), and per pool the nodes whose
        # view changed since its room last saw them.
        self._rooms: dict[str, PoolRoom] = {}
        self._changed: dict[str, set[str]] = {}
        self.waiting: dict[str, SimJob] = {}  # in the order they became ready
        self.ready: dict[str, float] = {}
        self.running: dict[str, Outcome] = {}
        self.per_queue: Counter[str] = Counter()
        self.attempt: Counter[str] = Counter()
        self.first_start: dict[str, float] = {}
        self.room: dict[str, bool] = {}  # with record_room: could its pool start it on arrival?
        self.record_room = False
        self.dirty: set[str] = set()  # pools to pass over at this moment
        self.freed: set[str] = set()  # … of which room may have grown since their last pass
        self.left = len(jobs)  # jobs not yet ended (or refused)

    # -- events -----------------------------------------------------------------------

    def at(self, time: float, kind: int, key: str = "", gen: int = 0) -> None:
        heapq.heappush(self.events, (time, kind, next(self._tie), key, gen))

    # -- nodes ------------------------------------------------------------------------

    def view(self, name: str) -> NodeView:
        """The node's free view now (cached until its allocations or state change)."""
        view = self._views.get(name)
        if view is None:
            view = self._views[name] = free_view(self.nodes[name], self.allocations[name])
        return view

    def _forget_view(self, name: str) -> None:
        self._views.pop(name, None)
        self._changed.setdefault(self.pool_of.get(name, WHOLE_SITE), set()).add(name)

    def touch(self, name: str) -> None:
        """Room on node `name` changed: its pool needs a full pass."""
        self._forget_view(name)
        pool = self.pool_of.get(name, WHOLE_SITE)
        self.dirty.add(pool)
        self.freed.add(pool)

    def views(self, pool: str) -> list[NodeView]:
        names = self._members.get(pool)
        if names is None:
            names = self._members[pool] = [n for n, p in self.pool_of.items() if p == pool]
        cached, view = self._views, self.view
        return [cached.get(name) or view(name) for name in names]

    def pool_room(self, pool: str) -> PoolRoom:
        """The pool's free views now, with their totals: one `PoolRoom` kept from pass to
        pass, brought up to date where a node's view changed (a pass that starts work
        updates it as it goes; this makes it the views of `view` again)."""
        room = self._rooms.get(pool)
        changed = self._changed.pop(pool, ())
        if room is None:
            room = self._rooms[pool] = PoolRoom({v.name: v for v in self.views(pool)})
        else:
            for name in changed:
                room.update(self.view(name))
        return room

    def pool_nodes(self, pool: str) -> tuple[NodeView, ...]:
        """The pool's nodes as they are now (one tuple until a node changes: passes know it)."""
        nodes = self._pool_nodes.get(pool)
        if nodes is None:
            names = self._members.get(pool) or [n for n, p in self.pool_of.items() if p == pool]
            nodes = self._pool_nodes[pool] = tuple(self.nodes[n] for n in names)
        return nodes

    def move(self, name: str, pool: str) -> None:
        """Node `name` serves `pool` from now on (a lease, or its end)."""
        self.pool_of[name] = pool
        self._members.clear()
        self._pool_nodes.clear()
        self._rooms.clear()
        self.touch(name)

    def set_node(self, node: NodeView) -> None:
        """The node as it is from now on (down, up, lent until a time)."""
        self.nodes[node.name] = node
        self._pool_nodes.clear()
        self._rooms.clear()
        self.touch(node.name)

    def holders(self, name: str) -> list[str]:
        return [k for k, o in self.running.items() if any(a.node == name for a in o.allocations)]

    # -- jobs -------------------------------------------------------------------------

    def start(self, job: SimJob, placement: Placement, now: float) -> None:
        del self.waiting[job.key]
        self.attempt[job.key] += 1
        # Its room is taken now; its process runs (wait ends, runtime begins) after start-up.
        now += self.site.startup_s.get(job.type, 0.0)
        self.first_start.setdefault(job.key, now)
        walltime = job.spec.walltime_s or job.runtime
        outcome = Outcome(
            job.key,
            job.type,
            job.project,
            job.submit,
            now,
            now + job.runtime,
            now + walltime,
            placement.allocations,
            self.attempt[job.key],
            self.first_start[job.key],
            self.room.get(job.key),
        )
        self.running[job.key] = outcome
        self.per_queue[job.queue] += 1
        for a in placement.allocations:
            self.allocations[a.node].append(a)
            self._forget_view(a.node)
        self.at(outcome.end, END, job.key, self.attempt[job.key])

    def stop(self, key: str, now: float, ended: str) -> SimJob:
        """End `key`'s running attempt at `now` (`ended`: done, preempted, lost, reclaimed)."""
        outcome = self.running.pop(key)
        job = self.jobs[key]
        self.per_queue[job.queue] -= 1
        for a in outcome.allocations:
            self.allocations[a.node].remove(a)
            self.touch(a.node)
        self.run.spans.append(Span(key, job.type, outcome.start, now, outcome.allocations, ended))
        if ended == "done":
            self.run.outcomes[key] = outcome
            self.left -= 1
        return job

    def enqueue(self, job: SimJob, now: float) -> None:
        self.waiting[job.key] = job
        self.ready[job.key] = now
        self.run.queued.setdefault(job.key, now)  # after admission: before it, quota held it

    def refuse(self, key: str, reason: str) -> None:
        self.waiting.pop(key, None)
        self.run.never[key] = reason
        self.run.never_types[key] = self.jobs[key].type
        self.left -= 1
