"""Which kind of work a task is: its declared type, or one inferred from its shape."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.decisions.humanize import count, format_duration
from scheduling.decisions.types import Classified
from scheduling.spec import TaskSpec


@dataclass(frozen=True, slots=True)
class ClassifierPolicy:
    """Thresholds of the classifier; the defaults are the default site's numbers (docs/policy.md).

    "Many" is inclusive (≥: more than one GPU is "many"), "long" is strict
    (> 2 h), "short" is strict (< 30 min), "small" is inclusive (≤).
    """

    many_gpus: int = 2
    many_cpus: int = 64
    long_estimate_s: int = 2 * 3600
    short_s: int = 30 * 60
    small_cpus: int = 4
    small_gpus: int = 0


DEFAULT_CLASSIFIER = ClassifierPolicy()


def classify(spec: TaskSpec, policy: ClassifierPolicy = DEFAULT_CLASSIFIER) -> Classified:
    """The task's type and why.

    In order: a declared type wins; else many GPUs with a long estimate is training; else many
    CPUs and no GPU is HPC; else a small request known to be short is an agent task; else GPU
    work is inference and CPU work is HPC batch. `sandbox` is never inferred, only declared.
    """
    if spec.type is not None:
        return Classified(spec.type, f"declared type {spec.type}")

    gpus = spec.resources.gpus
    cpus = spec.resources.cpus
    estimate = spec.estimate_s
    p = policy

    if gpus >= p.many_gpus and estimate is not None and estimate > p.long_estimate_s:
        return Classified(
            "ai-training",
            f"no type given; {count(gpus, 'GPU')} (≥ {p.many_gpus}) and estimate "
            f"{format_duration(estimate)} (> {format_duration(p.long_estimate_s)}) → ai-training",
        )

    if gpus == 0 and cpus >= p.many_cpus:
        return Classified(
            "hpc-simulation",
            f"no type given; no GPUs and {count(cpus, 'CPU')} (≥ {p.many_cpus}) → hpc-simulation",
        )

    # The expected duration: the estimate, else the walltime (an upper bound). With neither,
    # the duration is unknown and the task cannot be called short.
    duration: int | None
    if estimate is not None:
        duration, duration_name = estimate, "estimate"
    else:
        duration, duration_name = spec.walltime_s, "walltime"
    small = gpus <= p.small_gpus and cpus <= p.small_cpus
    if small and duration is not None and duration < p.short_s:
        return Classified(
            "agent",
            f"no type given; small request ({count(cpus, 'CPU')} ≤ {p.small_cpus}, "
            f"{count(gpus, 'GPU')}) and {duration_name} {format_duration(duration)} "
            f"(under {format_duration(p.short_s)}) → agent",
        )

    if gpus > 0:
        if gpus < p.many_gpus:
            why = f"fewer than the {p.many_gpus} of a training job"
        elif estimate is None:
            why = "but no estimate to show it is long training"
        else:
            why = (
                f"but estimate {format_duration(estimate)} is not over "
                f"{format_duration(p.long_estimate_s)}"
            )
        return Classified(
            "ai-inference",
            f"no type given; {count(gpus, 'GPU')}, {why} → ai-inference (GPU work that is not "
            f"long large training)",
        )

    if cpus > p.small_cpus:
        not_agent = f"more than an agent's {p.small_cpus}"
    elif duration is None:
        not_agent = "no estimate or walltime to show it is short"
    else:
        not_agent = (
            f"{duration_name} {format_duration(duration)} is not under an agent's "
            f"{format_duration(p.short_s)}"
        )
    return Classified(
        "hpc-simulation",
        f"no type given; no GPUs and {count(cpus, 'CPU')} (< {p.many_cpus}), {not_agent} "
        f"→ hpc-simulation (CPU batch work)",
    )
