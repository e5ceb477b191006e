"""Daily leases in the simulator: idle nodes of one pool lent to another queue's pool for a
while (`lend`, the live engine's decision), taken back at the lease's end with whatever runs
on them requeued as "reclaimed". `SitePolicy` (switchyard.py) keeps the books they use.
"""

from __future__ import annotations

import dataclasses

from scheduling.decisions.lend import Loan, lend
from scheduling.decisions.types import NodeView
from simulation.simulator.model import SimJob
from simulation.simulator.state import LEASE_END, LEASE_OPEN, Sim

DAY_S = 24 * 3600


class Leases:
    """The lease half of `SitePolicy`: it opens a site's leases every day and ends them."""

    sim: Sim
    pools: dict[str, tuple[NodeView, ...]]
    loans: dict[str, Loan]
    leases: dict[str, tuple[str, ...]]

    def requeued(self, job: SimJob, now: float, why: str) -> None: ...  # SitePolicy's

    def _lend(self) -> None:
        sim = self.sim
        for pool, nodes in lend(self.pools, self.loans).items():
            for node in nodes:
                was = sim.nodes[node.name]
                if (
                    sim.pool_of.get(node.name) != pool
                    or was.available_until != node.available_until
                ):
                    sim.set_node(dataclasses.replace(node, available=node.name not in sim.down))
                    sim.move(node.name, pool)

    def _open_lease(self, i: int, now: float) -> None:
        sim, lease = self.sim, self.sim.site.leases[i]
        sim.at(now + DAY_S, LEASE_OPEN, str(i))
        borrower = sim.site.queues[lease.queue].pool
        idle = sorted(
            (
                sim.nodes[name]
                for name, p in sim.pool_of.items()
                if p == lease.pool
                and name not in sim.down
                and not sim.allocations[name]
                and name not in self.loans
            ),
            key=lambda n: (-n.gpus, n.name),
        )
        if len(idle) < lease.count:
            sim.run.notes.append(
                f"t={now:.0f}s: lease of {lease.count} {lease.pool} nodes not opened: "
                f"{len(idle)} idle"
            )
            return
        until = now + lease.duration_s
        chosen = tuple(n.name for n in idle[: lease.count])
        for name in chosen:
            self.loans[name] = Loan(borrower, until)
        key = f"{i}@{now:.0f}"
        self.leases[key] = chosen
        sim.run.leases.append((now, until, chosen))
        sim.at(until, LEASE_END, key)
        self._lend()

    def _end_lease(self, key: str, now: float) -> None:
        sim = self.sim
        for name in self.leases.pop(key, ()):
            for holder in sim.holders(name):
                self.requeued(sim.stop(holder, now, "reclaimed"), now, "reclaimed")
            self.loans.pop(name, None)
        self._lend()
