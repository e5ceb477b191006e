"""Predicted runtimes: how long a job will really run, from the runs of the same work before.

Walltimes are what users ask for, and they ask generously: a job planned by its walltime
looks longer than it is, so backfill waits for room that frees much sooner. The prediction is
Tsafrir, Etsion and Feitelson's (EASY++, "Backfilling using system-generated predictions
rather than user runtime estimates"): the mean of the last two runtimes of the same work —
the same user, project and command — capped by the job's walltime; no history, no prediction
(plan with the walltime). It plans and estimates only: the walltime still ends a job.

Plain values only (no ORM, no clock): the live engine and the simulator call the same code.
docs/predictions.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from scheduling.spec import TaskSpec

# How many recent runs a prediction averages (EASY++ found two beat longer histories).
RECENT = 2

# A run shorter than this counts as this long in relative errors: a 0.2 s job predicted at
# 1 s is not "400 % off" in any way that matters to a plan.
RELATIVE_FLOOR_S = 1.0

# Where a plan moves a job's end once it outlives its prediction: the next of these past
# what it has run, at most its walltime (EASY++ raises an expired prediction in steps).
CORRECTION_STEPS_S = (
    60,
    5 * 60,
    15 * 60,
    30 * 60,
    3600,
    2 * 3600,
    5 * 3600,
    10 * 3600,
    20 * 3600,
    50 * 3600,
    100 * 3600,
)


def history_key(user: str, project: str, spec: TaskSpec) -> str:
    """The work a task is a run of, as 32 hex digits: its user, its project and what it runs
    — its command, else its script, else (an image run by its own entrypoint) its image, else
    its name. Two tasks with the same key are taken to run about as long."""
    if spec.command is not None:
        what = "command\0" + "\0".join(spec.command)
    elif spec.script is not None:
        what = "script\0" + spec.script
    elif spec.image is not None:
        what = "image\0" + spec.image
    else:
        what = "name\0" + spec.name
    text = f"{user}\0{project}\0{what}"
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def predict(
    recent: Sequence[float],
    walltime_s: float | None,
    asked: Sequence[float | None] | None = None,
) -> float | None:
    """The predicted runtime of a job asking `walltime_s`, from the runtimes in `recent` of
    the same work (oldest first); None when there is no history.

    Tsafrir's EASY++: the mean of the last `RECENT` runtimes, capped by `walltime_s` (None: no
    cap). Where each of those runs had a walltime (`asked`, aligned with `recent`) and this job
    has one, the larger of that and this job's walltime times the mean share of their
    walltimes the runs used: a researcher who asks what the work takes (the runs used all of
    it) is planned by what they ask now, not by what shorter runs of the same command took.
    """
    if not recent:
        return None
    last = recent[-RECENT:]
    mean = sum(last) / len(last)
    predicted = mean if walltime_s is None or mean <= walltime_s else float(walltime_s)
    if asked is not None and walltime_s:
        wanted = asked[-RECENT:]
        if len(wanted) == len(last) and all(wanted):
            used = [min(1.0, r / a) for r, a in zip(last, wanted, strict=True) if a]
            predicted = max(predicted, walltime_s * sum(used) / len(used))
    return predicted


class History:
    """The last `RECENT` runs of each key (runtime, and the walltime it asked), for
    predictions as jobs end and arrive.

    Cheap enough for a simulated trace of 100,000 jobs: a dict of tuples, no sorting. Record a
    job's run when it ends; predict for a job when it is queued.
    """

    __slots__ = ("_asked", "_recent")

    def __init__(self) -> None:
        self._recent: dict[Hashable, tuple[float, ...]] = {}
        self._asked: dict[Hashable, tuple[float | None, ...]] = {}

    def record(self, key: Hashable, runtime_s: float, walltime_s: float | None = None) -> None:
        """One more run of `key` that lasted `runtime_s` seconds and asked `walltime_s` (the
        oldest kept one goes)."""
        if not runtime_s >= 0:  # also refuses NaN
            raise ValueError(f"runtime_s: expected seconds >= 0, got {runtime_s!r}")
        self._recent[key] = (*self._recent.get(key, ()), runtime_s)[-RECENT:]
        self._asked[key] = (*self._asked.get(key, ()), walltime_s)[-RECENT:]

    def predict(self, key: Hashable, walltime_s: float | None) -> float | None:
        """`predict` over the kept runs of `key`; None when it has none."""
        kept = self._recent.get(key)
        return None if kept is None else predict(kept, walltime_s, self._asked[key])

    def recent(self, key: Hashable) -> tuple[float, ...]:
        """The kept runtimes of `key`, oldest first (() when none)."""
        return self._recent.get(key, ())

    def __len__(self) -> int:
        return len(self._recent)


def corrected(elapsed_s: float, walltime_s: float | None) -> float:
    """How long to plan a job for that has run `elapsed_s` and outlived its prediction: the
    next of `CORRECTION_STEPS_S` past `elapsed_s`, at most its walltime (past the last step:
    its walltime, or twice what it has run when it has none)."""
    step = next((s for s in CORRECTION_STEPS_S if s > elapsed_s), None)
    if step is None:
        return float(walltime_s) if walltime_s is not None else 2.0 * elapsed_s
    return float(step) if walltime_s is None else float(min(step, walltime_s))


def planned_runtime(
    elapsed_s: float, predicted_s: float | None, walltime_s: float | None
) -> float | None:
    """How long a plan holds a job's room for, from its start, once it has run `elapsed_s`
    (0 for one not started): its prediction while it has not outlived it, then `corrected`;
    its walltime where it has no prediction (None: it has neither, and never frees)."""
    if predicted_s is None:
        return None if walltime_s is None else float(walltime_s)
    if elapsed_s < predicted_s:
        return float(predicted_s)
    return corrected(elapsed_s, walltime_s)


@dataclass(frozen=True, slots=True)
class PredictionError:
    """How far predictions were from the runtimes that followed, over `count` jobs.

    `mean_abs_error_s`: mean |predicted − actual| in seconds; `mean_abs_relative_error`: mean
    |predicted − actual| / actual (actual at least `RELATIVE_FLOOR_S`); `share_under`: the
    share of jobs that ran longer than predicted (those a plan had to correct);
    `mean_ratio`: mean predicted / actual. None (all four) when `count` is 0.
    """

    count: int
    mean_abs_error_s: float | None = None
    mean_abs_relative_error: float | None = None
    share_under: float | None = None
    mean_ratio: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "mean_abs_error_s": self.mean_abs_error_s,
            "mean_abs_relative_error": self.mean_abs_relative_error,
            "share_under": self.share_under,
            "mean_ratio": self.mean_ratio,
        }


def prediction_error(pairs: Iterable[tuple[float, float]]) -> PredictionError:
    """The error of (predicted, actual) runtime pairs, in seconds."""
    n = 0
    abs_sum = rel_sum = ratio_sum = 0.0
    under = 0
    for predicted, actual in pairs:
        n += 1
        off = abs(predicted - actual)
        floor = max(actual, RELATIVE_FLOOR_S)
        abs_sum += off
        rel_sum += off / floor
        ratio_sum += predicted / floor
        under += predicted < actual
    if n == 0:
        return PredictionError(count=0)
    return PredictionError(
        count=n,
        mean_abs_error_s=abs_sum / n,
        mean_abs_relative_error=rel_sum / n,
        share_under=under / n,
        mean_ratio=ratio_sum / n,
    )
