"""When does a quota let a held task in? A replay of its project's quota from now on.

What holds a quota (admitted tasks that have not ended) ends at its planned end: its start
plus its walltime. The held tasks are reconsidered in the queue's order at each of those ends,
as the engine does when an admitted task ends: each one the quota lets in holds from then
until then plus its walltime. A held task's answer is the first moment its quotas admit it,
and which holders' ends made the room. None when that depends on work without a walltime, on
a budget (it waits for the next period), or when the quota refuses it outright.

The pool replay (estimate.py) then starts it no sooner than that. Pure: the selector passes
the rules, the holders and the held tasks, read from the database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduling.decisions.quota import Admit, Ask, QuotaRule, Reject, Usage, admit

_MAX_STEPS = 2_000

Scope = tuple[str, str, str | None]


@dataclass(frozen=True, slots=True)
class Holder:
    """An admitted task that holds quota until its planned end."""

    key: int
    ask: Ask
    ends_at: float | None  # epoch seconds: its start plus its walltime; None: unknown


@dataclass(frozen=True, slots=True)
class Held:
    """A task its quota holds; it holds quota for `walltime_s` once let in."""

    key: int
    ask: Ask
    walltime_s: int | None


@dataclass(frozen=True, slots=True)
class Release:
    """When the quota lets a held task in, and whose planned ends make the room (none: now)."""

    at: float
    after: tuple[Holder, ...] = ()


def quota_releases(
    rules: Iterable[QuotaRule],
    holders: Sequence[Holder],
    held: Sequence[Held],
    now: float,
    *,
    spent: Mapping[Scope, Usage] | None = None,
) -> dict[int, Release | None]:
    """Each held task's release (by key), or None where it cannot be known.

    `held` is in the order the engine reconsiders them (the queue's order); `spent` carries
    the budgets' hours used this period, which do not fall back while the replay runs.
    """
    rules = tuple(rules)
    running = list(holders)
    waiting = list(held)
    found: dict[int, Release | None] = {task.key: None for task in held}
    t = now
    freed: tuple[Holder, ...] = ()
    for _ in range(_MAX_STEPS):
        usage = _usage(running, spent or {})
        for task in list(waiting):
            decision = admit(task.ask, rules, usage)
            if isinstance(decision, Admit):
                found[task.key] = Release(t, freed)
                ends = t + task.walltime_s if task.walltime_s else None
                running.append(Holder(task.key, task.ask, ends))
                usage = _usage(running, spent or {})
                waiting.remove(task)
            elif isinstance(decision, Reject):
                waiting.remove(task)  # refused outright: it never starts
        upcoming = [h.ends_at for h in running if h.ends_at is not None and h.ends_at > t]
        if not waiting or not upcoming:
            break  # every held task placed, or the rest wait on the unknown
        t = min(upcoming)
        freed = tuple(h for h in running if h.ends_at == t)
        running = [h for h in running if h.ends_at is None or h.ends_at > t]
    return found


def _usage(holders: Iterable[Holder], spent: Mapping[Scope, Usage]) -> dict[Scope, Usage]:
    """What each scope holds: the holders' asks summed per project and per user, over the
    budgets' hours already spent."""
    usage: dict[Scope, Usage] = dict(spent)
    for holder in holders:
        ask = holder.ask
        for scope in ((ask.project, ask.queue, None), (ask.project, ask.queue, ask.user)):
            usage[scope] = usage.get(scope, Usage()).plus(ask)
    return usage
