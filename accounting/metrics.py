"""What is metered, in which unit, and how a run becomes quantities and a charge. Pure.

Quantities are whole numbers in a small base unit (core-milliseconds, MiB-milliseconds …) so
that sums are exact on every database and equal the scheduler's own numbers to the unit;
reports divide by `per` to show hours, minutes or days (docs/accounting.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    label: str
    unit: str  # what reports show
    base: str  # what a record stores
    per: int  # base units in one shown unit


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("cpu", "CPU", "core-hours", "core-milliseconds", 3_600_000),
        Metric("gpu", "GPU", "GPU-hours", "GPU-milliseconds", 3_600_000),
        Metric("memory", "Memory", "GiB-hours", "MiB-milliseconds", 1024 * 3_600_000),
        Metric("instance", "Instances", "instance-minutes", "instance-milliseconds", 60_000),
        Metric("storage", "Storage", "GiB-hours", "KiB-seconds", 1024 * 1024 * 3600),
        Metric("network", "Network", "GB", "MB", 1000),
    )
}
COMPUTE = ("cpu", "gpu", "memory", "instance")
SAMPLED = ("storage", "network")
# A storage sample's quantity in GB-days (the older form): exactly this many KiB-seconds,
# 10^9 bytes / 1024 × 86,400 s. KiB-seconds hold both units without a remainder.
KIB_SECONDS_PER_GB_DAY = 84_375_000_000
# Agents and sandboxes are billed by the instance-minute too (the sandbox queue's unit).
INSTANCE_TYPES = frozenset({"agent", "sandbox"})
MICROS = 1_000_000  # charges are kept in millionths of the currency


@dataclass(frozen=True, slots=True)
class RunUsage:
    """What one run was allocated and for how long (a backend's Run, without the ids)."""

    cpus: int
    gpus: int
    memory_mib: int
    elapsed_ms: int


def without_pull(runs: Sequence[RunUsage], pull_ms: int) -> list[RunUsage]:
    """The runs less the image pull their elapsed times include (a Slurm job's Prolog pulls
    its image inside its allocation, so sacct counts the pull; docs/accounting.md): `pull_ms`
    taken off the earliest runs, none below 0. The pull is not charged."""
    left = max(0, pull_ms)
    out = []
    for run in runs:
        cut = min(left, run.elapsed_ms)
        left -= cut
        out.append(dataclasses.replace(run, elapsed_ms=run.elapsed_ms - cut))
    return out


def quantities(task_type: str, runs: Iterable[RunUsage]) -> dict[str, int]:
    """Allocated × elapsed per metric, summed over the runs; metrics that come to 0 are left
    out (a job that never ran bills nothing)."""
    total = dict.fromkeys(COMPUTE, 0)
    for run in runs:
        total["cpu"] += run.cpus * run.elapsed_ms
        total["gpu"] += run.gpus * run.elapsed_ms
        total["memory"] += run.memory_mib * run.elapsed_ms
        if task_type in INSTANCE_TYPES:
            total["instance"] += run.elapsed_ms
    return {metric: value for metric, value in total.items() if value > 0}


def charge_micros(quantity: int, metric: str, price: Decimal) -> int:
    """The charge of `quantity` base units at `price` per shown unit, in millionths (rounded
    half to even, once per record)."""
    exact = Decimal(quantity) * price * MICROS / METRICS[metric].per
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))


def shown(quantity: int | Decimal, metric: str) -> Decimal:
    """A base-unit quantity in the unit reports show."""
    return Decimal(quantity) / METRICS[metric].per


def to_base(value: Decimal, metric: str) -> int:
    """A shown quantity (a collector's GB of network, say) in base units, rounded half to
    even."""
    return int((value * METRICS[metric].per).to_integral_value(rounding=ROUND_HALF_EVEN))


def storage_from_gb_days(value: Decimal) -> int:
    """A storage sample's GB-days in KiB-seconds, rounded half to even."""
    exact = value * KIB_SECONDS_PER_GB_DAY
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))


def storage_from_bytes(size: int, seconds: int) -> int:
    """`size` bytes held for `seconds`, in KiB-seconds, rounded half to even."""
    exact = Decimal(size) * seconds / 1024
    return int(exact.to_integral_value(rounding=ROUND_HALF_EVEN))
