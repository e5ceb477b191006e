"""How much of what a task asked for it really used: CPU efficiency from the backend's own
measure (the local supervisor's rusage, Slurm's TotalCPU), GPU use from nvidia-smi sampled
while it ran (docs/operations.md, "GPU use and GPU health"), and advice for next time
(docs/console.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, F, QuerySet, Sum

from scheduling.models import Attempt, Task

# Advice is given when a task used less than this share of the CPUs it asked for.
LOW_SHARE = 0.5
# ... or fewer GPUs than it asked for, or used them at less than this utilisation (%).
LOW_GPU_UTIL = 50.0


@dataclass(frozen=True, slots=True)
class Efficiency:
    asked_cpus: int
    used_cpus: float  # on average over the measured runs
    runs_ms: int

    @property
    def percent(self) -> float:
        return 100.0 * self.used_cpus / self.asked_cpus if self.asked_cpus else 0.0

    def advice(self) -> str | None:
        """A sentence for the task page, or None when the request fitted."""
        if self.asked_cpus < 2 or self.used_cpus >= LOW_SHARE * self.asked_cpus:
            return None
        suggest = max(1, math.ceil(self.used_cpus * 1.25))
        return (
            f"Asked {self.asked_cpus} CPUs, used {self.used_cpus:.1f} on average "
            f"({self.percent:.0f} %): asking for {suggest} next time would start sooner "
            "and cost less."
        )


@dataclass(frozen=True, slots=True)
class GpuEfficiency:
    asked_gpus: int
    used_gpus: int  # seen busy: its processes held a context there
    util_mean: float  # % of the GPUs it used, while it used them
    util_peak: float
    memory_peak_mib: int
    samples: int

    def advice(self) -> str | None:
        """A sentence for the task page naming the over-request, or None when it fitted."""
        asked = f"Asked {self.asked_gpus} GPU{'s' if self.asked_gpus != 1 else ''}"
        if not self.asked_gpus:
            return None
        if not self.used_gpus:
            return (
                f"{asked}, used none: no process of the job ran on a GPU. Ask for none if it "
                "does not need one, it would start sooner and cost less."
            )
        used = f"used {self.used_gpus} at {self.util_mean:.0f} %"
        if self.used_gpus < self.asked_gpus:
            return (
                f"{asked}, {used}: asking for {self.used_gpus} next time would start sooner "
                "and cost less."
            )
        if self.util_mean < LOW_GPU_UTIL:
            return (
                f"{asked}, {used}: the GPUs waited most of the time (on data loading, the "
                "CPUs?); fewer GPUs, or more CPUs to feed them, would serve it better."
            )
        return None


def task_gpu_use(task: Task) -> GpuEfficiency | None:
    """Its last attempt whose GPUs were sampled, or None (no GPU, nothing measured)."""
    attempt = Attempt.objects.filter(task=task, gpu_samples__gt=0).order_by("-number").first()
    if attempt is None:
        return None
    return GpuEfficiency(
        asked_gpus=task.gpus,
        used_gpus=attempt.gpu_busy or 0,
        util_mean=attempt.gpu_util_mean or 0.0,
        util_peak=attempt.gpu_util_peak or 0.0,
        memory_peak_mib=attempt.gpu_memory_peak_mib or 0,
        samples=attempt.gpu_samples or 0,
    )


def task_efficiency(task: Task) -> Efficiency | None:
    totals = Attempt.objects.filter(
        task=task, cpu_ms__isnull=False, cpu_elapsed_ms__gt=0
    ).aggregate(cpu=Sum("cpu_ms"), elapsed=Sum("cpu_elapsed_ms"))
    if not totals["elapsed"]:
        return None
    return Efficiency(task.cpus, totals["cpu"] / totals["elapsed"], totals["elapsed"])


def efficiency_report(tasks: QuerySet[Task], since: datetime) -> list[dict]:
    """Per user and type, over the attempts measured since `since`: CPU-hours asked and
    used, and the share used; least efficient first."""
    rows = (
        Attempt.objects.filter(
            task__in=tasks, cpu_ms__isnull=False, cpu_elapsed_ms__gt=0, ended_at__gte=since
        )
        .order_by()
        .values("task__owner__username", "task__type")
        .annotate(
            used_ms=Sum("cpu_ms"),
            asked_ms=Sum(F("cpu_elapsed_ms") * F("task__cpus")),
            runs=Count("id"),
        )
    )
    report = [
        {
            "user": row["task__owner__username"],
            "type": row["task__type"],
            "attempts": row["runs"],
            "asked_core_hours": row["asked_ms"] / 3_600_000,
            "used_core_hours": row["used_ms"] / 3_600_000,
            "percent": 100.0 * row["used_ms"] / row["asked_ms"] if row["asked_ms"] else 0.0,
        }
        for row in rows
    ]
    return sorted(report, key=lambda r: r["percent"])
