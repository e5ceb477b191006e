"""In what order waiting tasks start: level, own quota or borrowed, the time of day's weight,
fair share.

- **Level** (low / medium / high) first, always.
- **Weight** of the task's type at this time of day, from the queue's `weight_schedule`: a
  list of windows, each with weights by type (e.g. 08:00–20:00 agent × 2). Outside every
  window, and for types a window does not name, the weight is 1.
- **Fair share**, in `fairshare` queues: among projects, the one that used less of its share
  recently goes first. A project's usage decays by half every `half_life`; its factor is
  2^(−usage fraction / share fraction), as Slurm's classic fair-share formula (1: used nothing;
  0.5: used exactly its share; → 0: used far more).
- **Own quota before borrowed room**, within a level: a task admitted on room its project's
  cohort lends (docs/policy.md, quotas that lend) goes after the level's tasks on their own
  quota, so a lender gets its room back as borrowed work ends, and its next job is the one
  the pool's reservation protects.
- Then the time it became ready (first come, first served), then its id.
- **Past its queue's bound** (`wait_bound_s`): a task ready for longer than that goes before
  every task of its pool that is not, whatever its level, quota or weight, and among those
  past it the first ready goes first; each that cannot start gets a reservation of its own
  (`schedule_pass`), so it is never passed again (docs/policy.md, "A bound on waiting").

`priority_value` packs the same order into one integer for backends that take a number
(the local backend's start order, Slurm's job priority). Pure; the clock is a parameter.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from scheduling.decisions.humanize import format_duration
from scheduling.decisions.levels import HIGH

# Not a level a task is at: where a task past its queue's bound stands in the start order.
OVERDUE = HIGH + 1

_TIME = re.compile(r"^([01][0-9]|2[0-3]):([0-5][0-9])$")


@dataclass(frozen=True, slots=True)
class WeightWindow:
    start_min: int  # minutes after midnight, site time
    end_min: int  # exclusive; a window may wrap past midnight (20:00–08:00)
    weights: tuple[tuple[str, float], ...]

    def covers(self, minute: int) -> bool:
        if self.start_min <= self.end_min:
            return self.start_min <= minute < self.end_min
        return minute >= self.start_min or minute < self.end_min

    def weight(self, task_type: str) -> float | None:
        return dict(self.weights).get(task_type)


class ScheduleError(ValueError):
    def __init__(self, field: str, message: str, got: object = None) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message, self.got = field, message, got


def parse_weight_schedule(data: object, task_types: Sequence[str]) -> tuple[WeightWindow, ...]:
    """`[{"from": "08:00", "to": "20:00", "weights": {"agent": 2}}]` → windows, or an error
    naming the field (`weight_schedule[0].weights.agent`)."""
    if data in (None, [], {}):
        return ()
    if not isinstance(data, list):
        raise ScheduleError("weight_schedule", "must be a list of windows", data)
    windows = []
    for i, window in enumerate(data):
        at = f"weight_schedule[{i}]"
        if not isinstance(window, dict) or set(window) != {"from", "to", "weights"}:
            raise ScheduleError(at, 'must be {"from": "HH:MM", "to": "HH:MM", "weights": {…}}')
        bounds = []
        for key in ("from", "to"):
            match = _TIME.match(str(window[key]))
            if not match:
                raise ScheduleError(f"{at}.{key}", "must be a time HH:MM", window[key])
            bounds.append(int(match[1]) * 60 + int(match[2]))
        if bounds[0] == bounds[1]:
            raise ScheduleError(f"{at}.to", "must differ from from", window["to"])
        weights = window["weights"]
        if not isinstance(weights, dict) or not weights:
            raise ScheduleError(f"{at}.weights", "must map task types to weights", weights)
        pairs = []
        for task_type, weight in weights.items():
            if task_type not in task_types:
                raise ScheduleError(
                    f"{at}.weights", f"must name task types: {', '.join(task_types)}", task_type
                )
            if (
                isinstance(weight, bool)
                or not isinstance(weight, int | float)
                or not 0 < weight <= 10
            ):
                raise ScheduleError(
                    f"{at}.weights.{task_type}", "must be a number above 0, at most 10", weight
                )
            pairs.append((task_type, float(weight)))
        windows.append(WeightWindow(bounds[0], bounds[1], tuple(sorted(pairs))))
    return tuple(windows)


def weight_at(windows: Iterable[WeightWindow], task_type: str, minute_of_day: int) -> float:
    for window in windows:
        if window.covers(minute_of_day):
            weight = window.weight(task_type)
            if weight is not None:
                return weight
    return 1.0


def format_window(window: WeightWindow) -> str:
    def hhmm(minutes: int) -> str:
        return f"{minutes // 60:02d}:{minutes % 60:02d}"

    weights = ", ".join(f"{t} × {w:g}" for t, w in window.weights)
    return f"{hhmm(window.start_min)}–{hhmm(window.end_min)}: {weights}"


# -- fair share -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run:
    """One stretch of use: `units` (cores, or GPUs) from `start` to `end` (None: running)."""

    units: float
    start: float  # epoch seconds
    end: float | None = None


def decayed_usage(runs: Iterable[Run], now: float, half_life_s: float) -> float:
    """Unit-seconds used, each second weighted 2^(−age / half_life).

    The integral of the decay over each run, so a long run counts its early part less.
    """
    k = decay_rate(half_life_s)
    total = 0.0
    for run in runs:
        end = now if run.end is None else min(run.end, now)
        if end > run.start:
            total += decayed(run.units, run.start, end, now, k)
    return total


def decay_rate(half_life_s: float) -> float:
    """k of exp(−k · age), for a half life."""
    return math.log(2) / half_life_s


def decayed(units: float, start: float, end: float, now: float, k: float) -> float:
    """One run's `decayed_usage` from `start` to `end` (≤ now, > start) at rate `k`: the
    integral from start to end of exp(−k (now − t)) dt, times its units."""
    return units * (math.exp(-k * (now - end)) - math.exp(-k * (now - start))) / k


def share_factors(usage: Mapping[str, float], shares: Mapping[str, float]) -> dict[str, float]:
    """Each project's fair-share factor in (0, 1]: 2^(−usage fraction / share fraction)."""
    total_usage = sum(usage.values())
    total_shares = sum(shares.get(p, 1.0) for p in set(usage) | set(shares)) or 1.0
    factors = {}
    for project in set(usage) | set(shares):
        share = shares.get(project, 1.0) / total_shares
        used = usage.get(project, 0.0) / total_usage if total_usage > 0 else 0.0
        factors[project] = 2.0 ** (-used / share) if share > 0 else 0.0
    return factors


# -- the order ------------------------------------------------------------------------


def order_key(
    *,
    level: int,
    weight: float,
    share: float,
    ready_at: float,
    task_id: int,
    borrowed: bool = False,
) -> tuple:
    """Sort ascending: higher level first; at one level, a task on its project's own quota
    before one admitted on borrowed room; then higher weight and share, then earlier, then
    lower id. `OVERDUE` (past its queue's bound) before every level, earlier first."""
    if level >= OVERDUE:
        return (-OVERDUE, False, 0.0, 0.0, ready_at, task_id)
    return (-level, borrowed, -round(weight, 3), -round(share, 3), ready_at, task_id)


def overdue(waited_s: float, bound_s: int | None) -> bool:
    """Whether a task ready for `waited_s` is past its queue's bound (None: no bound)."""
    return bound_s is not None and waited_s > bound_s


def overdue_reason(queue: str, bound_s: int | None) -> str:
    return (
        f"waited past queue {queue}'s bound of {format_duration(bound_s or 0)}: it goes before "
        "every task of its pool that has not, and nothing passes it"
    )


_LEVEL_BAND = 100_000_000
_OWN_ROOM_BAND = 50_000_000
_WEIGHT_BAND = 1_000
OVERDUE_VALUE = (OVERDUE + 1) * _LEVEL_BAND


def priority_value(
    *, level: int, weight: float = 1.0, share: float = 1.0, borrowed: bool = False
) -> int:
    """One integer carrying level, own or borrowed room, weight and share, higher first (fits
    Slurm's uint32).

    Level bands of 10⁸; within one, a task on its own quota 5 × 10⁷ above one on borrowed
    room; then the weight in thousandths (up to 10) times 10³, then the share factor in
    thousandths. Ties go to the backend's own order (first submitted). `OVERDUE`: one number
    above every band, the same for all, so those past their bound go first submitted first.
    """
    if level >= OVERDUE:
        return OVERDUE_VALUE
    weight_milli = max(0, min(9_999, round(weight * 1000)))
    share_milli = max(0, min(999, round(share * 999)))
    own = 0 if borrowed else _OWN_ROOM_BAND
    return (min(level, HIGH) + 1) * _LEVEL_BAND + own + weight_milli * _WEIGHT_BAND + share_milli


def on_room(value: int, *, borrowed: bool) -> int:
    """`value` (a `priority_value`) for a task admitted on its own quota or on borrowed room:
    the same level, weight and share, in the band its admission puts it in (past its bound:
    the same)."""
    if value >= OVERDUE_VALUE:
        return value
    level, rest = divmod(value, _LEVEL_BAND)
    return level * _LEVEL_BAND + (0 if borrowed else _OWN_ROOM_BAND) + rest % _OWN_ROOM_BAND
