"""The engine: the only code that talks to backends (docs/architecture.md).

- `dispatch` — submit a pending task's next attempt, exactly once; the pending sweep.
- `follow` — one batched poll per backend; what a job's end means for its task.
- `settle` — after a task ends: dependants, workflows, wait timeouts, triggers.
- `jobs` — cancel requests carried out, ended jobs' housekeeping.
- `registry` — backends by alias.
- `cluster` — the Slurm cluster's files and accounts, for the management commands.

Celery tasks (`scheduling/tasks.py`) call these.
"""

from __future__ import annotations

from scheduling.engine.dispatch import (
    DispatchRetry,
    claim_many,
    dispatch_along,
    dispatch_claimed_many,
    sweep_pending,
    task_dispatch,
)
from scheduling.engine.follow import (
    QUEUED_REASON,
    SCHEDULER_UNREACHABLE,
    active_backends,
    apply_job,
    backend_poll,
    retry_backoff_seconds,
)
from scheduling.engine.jobs import (
    CancelRetry,
    cancel_requested,
    housekeep,
    sweep_cancels,
)
from scheduling.engine.registry import get_backend

__all__ = [
    "QUEUED_REASON",
    "SCHEDULER_UNREACHABLE",
    "CancelRetry",
    "DispatchRetry",
    "claim_many",
    "dispatch_along",
    "dispatch_claimed_many",
    "active_backends",
    "apply_job",
    "backend_poll",
    "cancel_requested",
    "get_backend",
    "housekeep",
    "retry_backoff_seconds",
    "sweep_cancels",
    "sweep_pending",
    "task_dispatch",
]
