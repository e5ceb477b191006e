"""Priority levels: multi-level feedback, declared as rules per task type (and queue).

A task enters at its rule's level and, while it waits unstarted, moves by `step` after
`every_s` seconds (once, or each time when `repeat`), stopping at `limit`. The default site's
rules (docs/policy.md): agent and sandbox tasks enter high and drop to medium after 30 s; training
enters medium and rises one level per 10 minutes waiting, up to high; HPC enters low.

Two things override the rule: an approved raise (a floor, until it expires) and the task's
own `priority: low` (a cap it chose). Pure: the clock is a parameter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from scheduling.decisions.humanize import format_duration

LOW, MEDIUM, HIGH = 0, 1, 2
LEVELS = ("low", "medium", "high")


@dataclass(frozen=True, slots=True)
class LevelRule:
    task_type: str
    queue: str | None = None  # None: any queue
    start: int = MEDIUM
    step: int = 0  # +1 rises, -1 drops, 0 stays
    every_s: int | None = None
    limit: int | None = None  # where the moves stop (None: the top or bottom level)
    repeat: bool = False  # move again every `every_s`, not only once

    def describe(self) -> str:
        text = f"{self.task_type} tasks enter {LEVELS[self.start]}"
        if self.step and self.every_s:
            verb = "rise" if self.step > 0 else "drop"
            stop = LEVELS[self._bound()]
            if self.repeat:
                text += f" and {verb} one level per {format_duration(self.every_s)} waiting"
                text += f", up to {stop}" if self.step > 0 else f", down to {stop}"
            else:
                text += f" and {verb} to {stop} after {format_duration(self.every_s)} unstarted"
        return text

    def _bound(self) -> int:
        if self.limit is not None:
            return self.limit
        return HIGH if self.step > 0 else LOW


DEFAULT_RULE = LevelRule(task_type="*", start=MEDIUM)


@dataclass(frozen=True, slots=True)
class Waiting:
    """What a waiting task's level depends on."""

    task_type: str
    queue: str
    ready_at: datetime  # since when it could run (submitted, or released)
    cap: int | None = None  # the task's own `priority: low`
    floor: int | None = None  # an approved raise …
    floor_until: datetime | None = None  # … until then (None: no end)
    floor_reason: str = ""


@dataclass(frozen=True, slots=True)
class Level:
    level: int
    reason: str

    @property
    def name(self) -> str:
        return LEVELS[self.level]


def cap_of(priority: str) -> int | None:
    """A task's own `priority: low` caps its level; `normal` and `high` do not."""
    return LOW if priority == "low" else None


def rule_for(rules: Iterable[LevelRule], task_type: str, queue: str) -> LevelRule:
    """The queue's own rule for the type, else the rule for the type in any queue."""
    general = None
    for rule in rules:
        if rule.task_type == task_type:
            if rule.queue == queue:
                return rule
            if rule.queue is None and general is None:
                general = rule
    return general or DEFAULT_RULE


def level(task: Waiting, rule: LevelRule, now: datetime) -> Level:
    """The task's level now, and why."""
    waited = max(0.0, (now - task.ready_at).total_seconds())
    current = rule.start
    reason = f"{task.task_type} tasks enter {LEVELS[rule.start]}"
    if rule.step and rule.every_s:
        steps = int(waited // rule.every_s)
        if not rule.repeat:
            steps = min(steps, 1)
        if steps:
            bound = rule._bound()
            moved = rule.start + rule.step * steps
            moved = min(moved, bound) if rule.step > 0 else max(moved, bound)
            if moved != rule.start:
                verb = "rose" if moved > rule.start else "dropped"
                current = moved
                # The rule's time, not the time waited so far: the reason stays the same from
                # one pass to the next, so a pass writes only what really changed.
                taken = abs(moved - rule.start) * rule.every_s
                reason = (
                    f"{reason}; {verb} to {LEVELS[moved]} after {format_duration(taken)} waiting"
                )
    if (
        task.floor is not None
        and task.floor > current
        and (task.floor_until is None or now < task.floor_until)
    ):
        current = task.floor
        reason = task.floor_reason or f"raised to {LEVELS[current]} by an approved request"
    if task.cap is not None and current > task.cap:
        current = task.cap
        reason = f"kept at {LEVELS[current]}: the task asked for priority {LEVELS[current]}"
    return Level(current, reason)


def next_change(task: Waiting, rule: LevelRule, now: datetime) -> float | None:
    """Seconds until the rule would move the task again, if it will (for a waiting page)."""
    if not (rule.step and rule.every_s):
        return None
    waited = max(0.0, (now - task.ready_at).total_seconds())
    steps = int(waited // rule.every_s)
    done = (rule.start + rule.step * steps) * rule.step >= rule._bound() * rule.step
    if done or (not rule.repeat and steps >= 1):
        return None
    return (steps + 1) * rule.every_s - waited
