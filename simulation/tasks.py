"""Celery tasks of the simulation app: the queued what-if runs, one at a time (docs/simulation.md).

simulation/services.py publishes them by name (`RUN_QUEUED`) through scheduling's outbox.
"""

from __future__ import annotations

from celery import shared_task

from config.locks import exclusive
from simulation.selectors import next_queued_simulation
from simulation.services import RUN_QUEUED, simulation_fail_orphans, simulation_run


def _run_queued() -> int:
    """The queued what-if runs, oldest first, one at a time across the site: a long run holds
    one worker process, never all of them (docs/simulation.md)."""
    with exclusive("simulations") as held:
        if not held:
            return 0  # the holder takes the new run after its own; the beat is the safety net
        simulation_fail_orphans()
        done: set[int] = set()
        while (run_id := next_queued_simulation()) is not None and run_id not in done:
            simulation_run(run_id)
            done.add(run_id)
        return len(done)


run_queued = shared_task(name=RUN_QUEUED, acks_late=True)(_run_queued)
# The name the task had while scheduling ran it: messages already queued under it by a
# portal before the upgrade are still consumed.
shared_task(name="scheduling.simulations", acks_late=True)(_run_queued)
