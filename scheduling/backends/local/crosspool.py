"""The local backend's scheduling pass with backfill across pools (docs/policy.md,
"Backfill across pools"): `schedule_pass` over every pool, then `borrow_after` for the jobs
it left waiting in a pool switched on to borrow. The pairs come from the portal
(`borrowing_source`, the enabled `PoolBorrowing` rows of this backend's pools), read at most
once per `inventory_ttl_s` like the inventory.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime

from scheduling.backends.local.jobstore import FINAL, JobStore
from scheduling.decisions.borrow import Borrowing, borrow_after
from scheduling.decisions.predict import planned_runtime
from scheduling.decisions.reserve import Busy, Plan
from scheduling.decisions.schedule import Decision, WaitingJob, schedule_pass
from scheduling.decisions.types import NodeAllocation, NodeView

BorrowingSource = Callable[[str], Sequence[Borrowing]]


class LocalCrossPool:
    """The pass half of `LocalBackend` that lends idle cores across pools."""

    alias: str
    store: JobStore
    inventory_ttl_s: float
    _borrowing_source: BorrowingSource
    _borrowing_cache: tuple[float, tuple[Borrowing, ...]] | None

    def _inventory(self) -> dict[str, tuple[NodeView, ...]]:
        raise NotImplementedError  # LocalBackend's

    def _lent(self, pools: dict[str, tuple[NodeView, ...]]) -> dict[str, tuple[NodeView, ...]]:
        raise NotImplementedError  # LocalBackend's

    def _borrowing(self) -> tuple[Borrowing, ...]:
        now = time.monotonic()
        cached = self._borrowing_cache
        if cached and now - cached[0] < self.inventory_ttl_s:
            return cached[1]
        rules = tuple(self._borrowing_source(self.alias))
        self._borrowing_cache = (now, rules)
        return rules

    def _decide(
        self,
        jobs: Sequence[WaitingJob],
        *,
        pools: Mapping[str, Sequence[NodeView]],
        allocations: Mapping[str, Sequence[NodeAllocation]],
        running: Mapping[str, int],
        drained: Mapping[str, str] | AbstractSet[str],
        sandbox_missing: str | None,
        now: float,
        busy: Callable[[], Iterable[Busy]],
    ) -> list[Decision]:
        rules = self._borrowing()
        # The lending pools' reservations, kept through the pass for the borrowing after it.
        plans = {
            r.lender: Plan(pools.get(r.lender, ()), busy, now=now, drained=drained) for r in rules
        }
        decisions = schedule_pass(
            jobs,
            pools=pools,
            allocations=allocations,
            running=running,
            drained=drained,
            sandbox_missing=sandbox_missing,
            now=now,
            busy=busy,  # read only to make a reservation
            plans=plans,
            backfill="shortest",
        )
        return borrow_after(
            jobs,
            decisions,
            rules=rules,
            pools=pools,
            allocations=allocations,
            running=running,
            now=now,
            plans=plans,
            drained=drained,
        )

    def _planned_ends(self, states: Mapping[str, dict], now: float) -> list[Busy]:
        """The running jobs' allocations, each held until its start (a job still starting:
        now) plus its predicted runtime, or once it outlived that the next correction step
        past what it has run, at most its walltime (`planned_runtime`); its walltime where
        it has no prediction; None where it has neither (docs/predictions.md). Work on
        another pool's idle cores is planned by its walltime, as it was let in there: the
        lender's next reservation never waits on a prediction of borrowed work."""
        pool_of = {}
        if self._borrowing():
            lent = self._lent(self._inventory())
            pool_of = {n.name: pool for pool, nodes in lent.items() for n in nodes}
        busy = []
        for key, state in states.items():
            if state["state"] == "pending" or state["state"] in FINAL:
                continue
            request = self.store.request(key)
            started = state.get("started_at")
            begun = datetime.fromisoformat(started).timestamp() if started else now
            allocations = self.store.read_alloc(key, state).allocations
            own = request.queue.pool
            borrowed = any(pool_of.get(a.node, own) != own for a in allocations)
            predicted = None if borrowed else request.planned_runtime_s
            runtime = planned_runtime(now - begun, predicted, request.spec.walltime_s or None)
            ends = begun + runtime if runtime is not None else None
            busy += [Busy(a, ends) for a in allocations]
        return busy
