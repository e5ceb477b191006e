"""A task's life as plain rules: which state moves are allowed, and what an ended attempt means.

The task states (docs/architecture.md, "Task states"): `pending` (stored, not yet decided) →
`waiting` (held by the engine: dependency, trigger…) → `queued` (in the backend) → `running` →
`succeeded` | `failed` | `cancelled` | `timeout` | `skipped`. An attempt that fails while
attempts are left sends the task back to `pending` after a backoff; the task's state becomes
terminal only when its last attempt ends.

The state names are defined here, once: the engine and the simulator decide with these same
functions, and the models' `TaskState` and `AttemptState` choices are these strings.
"""

from __future__ import annotations

from dataclasses import dataclass

PENDING = "pending"
WAITING = "waiting"
QUEUED = "queued"
RUNNING = "running"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
TIMEOUT = "timeout"
SKIPPED = "skipped"
PREEMPTED = "preempted"  # an attempt's only: ended to make room, its task requeued

TASK_STATES = (PENDING, WAITING, QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, SKIPPED)
# An attempt exists once its job is submitted: a task's states from queued on, and preempted.
ATTEMPT_STATES = (QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, SKIPPED, PREEMPTED)

TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, TIMEOUT, SKIPPED})
ACTIVE = frozenset({QUEUED, RUNNING})  # a backend job exists for the current attempt
BAD_ENDS = frozenset({FAILED, TIMEOUT, CANCELLED})
WAITS = frozenset({PENDING, WAITING, QUEUED})  # no job runs yet: the reason says why

# Every move the state machine allows. Terminal states have no way out.
TRANSITIONS: dict[str, frozenset[str]] = {
    PENDING: frozenset({WAITING, QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, SKIPPED}),
    WAITING: frozenset({PENDING, CANCELLED, SKIPPED, FAILED}),
    QUEUED: frozenset({RUNNING, PENDING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, SKIPPED}),
    RUNNING: frozenset({PENDING, SUCCEEDED, FAILED, CANCELLED, TIMEOUT, SKIPPED}),
    **{state: frozenset() for state in TERMINAL},
}


def can_move(frm: str, to: str) -> bool:
    return to in TRANSITIONS[frm]


@dataclass(frozen=True, slots=True)
class Retry:
    """Run the task again after `backoff_s`; the state goes back to pending."""

    backoff_s: float
    reason: str  # the task's reason while it waits for the next attempt
    message: str  # the event that records the ended attempt


@dataclass(frozen=True, slots=True)
class End:
    """The task ends in `state` (terminal) with `reason`."""

    state: str
    reason: str


def retry_backoff_seconds(attempt: int, *, base_s: float, cap_s: float) -> float:
    """`base_s`, then doubled after every further attempt (1 s, 2 s, 4 s …), at most `cap_s`.

    Short on purpose: Celery countdowns must stay far below the broker's visibility timeout.
    """
    return min(base_s * 2 ** (attempt - 1), cap_s)


def attempt_outcome(
    *,
    ended: str,
    retriable: bool,
    reason: str,
    attempt: int,
    retry_count: int,
    fail_action: str,
    backoff_base_s: float,
    backoff_cap_s: float,
) -> Retry | End:
    """What the task does now that attempt number `attempt` ended in state `ended`.

    `retriable` says whether this kind of end may be retried (a failure, a timeout, a lost
    node — never a cancel). While attempts are left (`retry_count` retries after the first
    attempt) the task is retried with a backoff; otherwise a failure or timeout of a task
    with `fail_action: skip` ends it `skipped`, so its dependants still run.
    """
    left = retry_count + 1 - attempt
    if retriable and left > 0:
        backoff = retry_backoff_seconds(attempt, base_s=backoff_base_s, cap_s=backoff_cap_s)
        return Retry(
            backoff_s=backoff,
            reason=f"attempt {attempt} {ended}: {reason}; retrying in {backoff:g}s",
            message=f"attempt {attempt} ended {ended} ({reason}); {left} attempt(s) left",
        )
    if ended in (FAILED, TIMEOUT) and fail_action == "skip":
        return End(SKIPPED, f"{ended}: {reason}; skipped (fail_action: skip)")
    return End(ended, reason)
