"""Predicted runtimes in words: a task's ("ran 14min, predicted 12min30s: 1min30s under") and a
queue's error ("off by 4min on average over 57 tasks"). docs/predictions.md."""

from __future__ import annotations

from typing import Any

from scheduling.decisions.humanize import format_duration
from scheduling.decisions.predict import PredictionError
from scheduling.models import Task
from scheduling.selectors.runtimes import ERROR_WINDOW, measured_runtime_s


def _shown(seconds: float) -> str:
    """To the second under an hour, to the minute above: `750` → `12min30s`,
    `5430` → `1h30min`."""
    whole = round(seconds) if seconds < 3600 else round(seconds / 60) * 60
    return format_duration(whole)


def task_prediction(task: Task) -> dict[str, Any] | None:
    """Its predicted runtime, and once it ended, how long it ran and how far off that was
    (`off_s` > 0: it ran longer than predicted); None before it is queued."""
    if not task.runtime_key:
        return None
    predicted = task.predicted_runtime_s
    if predicted is None:
        return {
            "predicted_s": None,
            "ran_s": None,
            "off_s": None,
            "text": "no predicted runtime: no earlier run of the same work to go by",
        }
    ran = measured_runtime_s(task)
    if ran is None:
        text = f"predicted runtime {_shown(predicted)}"
        return {"predicted_s": predicted, "ran_s": None, "off_s": None, "text": text}
    off = ran - predicted
    if _shown(abs(off)) == "0s":
        verdict = "as predicted"
    else:
        verdict = f"{_shown(abs(off))} {'under' if off > 0 else 'over'}"
    text = f"ran {_shown(ran)}, predicted {_shown(predicted)}: {verdict}"
    return {"predicted_s": predicted, "ran_s": ran, "off_s": off, "text": text}


def queue_prediction_text(error: PredictionError) -> str:
    """A queue's prediction error over the tasks measured lately, in one line."""
    days = ERROR_WINDOW.days
    if error.count == 0 or error.mean_abs_error_s is None:
        return f"no predicted runtime measured against its run in the last {days} days"
    tasks = "1 task" if error.count == 1 else f"{error.count} tasks"
    longer = round(100 * (error.share_under or 0.0))
    return (
        f"off by {_shown(error.mean_abs_error_s)} on average over {tasks} of the last "
        f"{days} days ({round(100 * (error.mean_abs_relative_error or 0.0))} % of their "
        f"runtime; {longer} % ran longer than predicted)"
    )
