"""Which other declared type would take a task whose type was guessed.

The classifier guesses from the resources alone (classify.py). When the guess sends a task to
a queue that refuses it, or to one its author did not expect, the researcher needs to hear
that the type was a guess and which `type:` to write instead: the refusal and the submit
page's preview name it (docs/policy.md, "When the guess is wrong"). Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scheduling.decisions.check import PoolCapacity, check
from scheduling.decisions.humanize import format_duration
from scheduling.decisions.route import route
from scheduling.decisions.types import Classified, QueuePolicy, Refused, RoutingRuleView
from scheduling.spec import TASK_TYPES, TaskSpec

# A sandbox is a live session made through the API, never a batch job's other name. A task
# with GPUs is offered the GPU types, one without the CPU types: a queue of the other kind
# may take it, but that is not what its author meant.
_GPU_TYPES = ("ai-training", "ai-inference")
_OFFERED = tuple(t for t in TASK_TYPES if t != "sandbox")


@dataclass(frozen=True, slots=True)
class Fit:
    """`type` routes the task to `queue`, which can run it (once it has an estimate, when
    `needs_estimate`)."""

    type: str
    queue: str
    needs_estimate: bool = False

    def advice(self, walltime_s: int | None) -> str:
        """`type: ai-training` (queue training takes it), with the estimate it requires."""
        if not self.needs_estimate:
            return f"`type: {self.type}` (queue {self.queue} takes it)"
        most = f" of at most the walltime {format_duration(walltime_s)}" if walltime_s else ""
        return (
            f"`type: {self.type}` with an `estimate:` of the run time{most} (queue "
            f"{self.queue} takes it and requires an estimate)"
        )


def other_fits(
    spec: TaskSpec,
    guessed: str,
    rules: Sequence[RoutingRuleView],
    queues: Mapping[str, QueuePolicy],
    capacity: Callable[[str], PoolCapacity],
) -> list[Fit]:
    """The types other than `guessed` whose queue would take `spec`, in TASK_TYPES' order,
    among the GPU types for a task with GPUs and the CPU types for one without.

    A task that names its queue is left alone: its author chose where it goes.
    """
    if spec.queue is not None:
        return []
    gpus = spec.resources.gpus > 0
    fits = []
    for task_type in _OFFERED:
        if task_type == guessed or (task_type in _GPU_TYPES) != gpus:
            continue
        fit = _fit(dataclasses.replace(spec, type=task_type), task_type, rules, queues, capacity)
        if fit is not None:
            fits.append(fit)
    return fits


def _fit(
    spec: TaskSpec,
    task_type: str,
    rules: Sequence[RoutingRuleView],
    queues: Mapping[str, QueuePolicy],
    capacity: Callable[[str], PoolCapacity],
) -> Fit | None:
    routed = route(spec, task_type, rules, queues)
    if isinstance(routed, Refused):
        return None
    queue = queues[routed.queue]
    refused = check(spec, queue, capacity(queue.pool))
    if refused is None:
        return Fit(task_type, queue.name)
    if refused.field == "estimate" and spec.estimate_s is None and queue.requires_estimate:
        # The queue wants an estimate the task does not give: one of its walltime (or the
        # queue's limit) shows whether all else fits.
        guess = spec.walltime_s or queue.default_walltime_s or queue.max_walltime_s or 3600
        with_estimate = dataclasses.replace(spec, estimate_s=guess)
        if check(with_estimate, queue, capacity(queue.pool)) is None:
            return Fit(task_type, queue.name, needs_estimate=True)
    return None


def guessed_note(classified: Classified, fits: Sequence[Fit], walltime_s: int | None) -> str:
    """What a refusal of a task with a guessed type adds: that the type was a guess, by which
    rule, and the type to write instead; "" for a declared type."""
    if not classified.reason.startswith("no type given"):
        return ""
    rule = classified.reason.removeprefix("no type given; ")
    text = f"; its type {classified.type} was guessed, not given ({rule})"
    if not fits:
        return text + ": give the type if it is another kind of work"
    options = " or ".join(fit.advice(walltime_s) for fit in fits)
    return f"{text}; to run it, declare {options}"
