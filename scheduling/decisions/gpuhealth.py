"""When a node's GPUs make it unfit to run jobs: too hot, or memory errors the GPU could not
correct (docs/operations.md, "GPU use and GPU health"). Pure: the node check's readings and
the pool's limits in, the reasons out.

The readings are a node's health metrics as its backend reported them, per GPU index:
`gpu<N>_c` (°C), `gpu<N>_ecc` (uncorrected ECC errors since the driver loaded),
`gpu<N>_remap_pending` and `gpu<N>_remap_failed` (memory rows waiting for a reset to be
remapped; rows it could not remap). A row pending or failed drains the node in every pool: its
GPU needs a reset, or a new GPU, before it is trusted with a job again.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_METRIC = re.compile(r"^gpu(\d+)_(c|ecc|remap_pending|remap_failed)$")


DEFAULT_MAX_TEMPERATURE_C = 90.0
DEFAULT_MAX_ECC_UNCORRECTED = 0  # any uncorrected error drains: its memory is not trusted


@dataclass(frozen=True, slots=True)
class GpuLimits:
    max_temperature_c: float = DEFAULT_MAX_TEMPERATURE_C
    max_ecc_uncorrected: int = DEFAULT_MAX_ECC_UNCORRECTED


def limits_for(pool: str, table: Mapping[str, Mapping[str, float]]) -> GpuLimits:
    """The pool's own limits over the site's ("*"), over the defaults."""
    merged = {**table.get("*", {}), **table.get(pool, {})}
    return GpuLimits(
        max_temperature_c=float(merged.get("max_temperature_c", DEFAULT_MAX_TEMPERATURE_C)),
        max_ecc_uncorrected=int(merged.get("max_ecc_uncorrected", DEFAULT_MAX_ECC_UNCORRECTED)),
    )


def gpu_problems(metrics: Mapping[str, object], limits: GpuLimits, pool: str) -> list[str]:
    """What is wrong with the node's GPUs, one sentence each naming the GPU and its value;
    none when all are within the pool's limits."""
    readings: dict[int, dict[str, float]] = {}
    for name, value in metrics.items():
        match = _METRIC.match(name)
        if match and isinstance(value, int | float) and not isinstance(value, bool):
            readings.setdefault(int(match[1]), {})[match[2]] = float(value)
    problems = []
    for index, seen in sorted(readings.items()):
        temperature, ecc = seen.get("c"), seen.get("ecc")
        if temperature is not None and temperature > limits.max_temperature_c:
            problems.append(
                f"GPU {index} at {temperature:g} °C, over the {limits.max_temperature_c:g} °C "
                f"limit of pool {pool}"
            )
        if ecc is not None and ecc > limits.max_ecc_uncorrected:
            problems.append(
                f"GPU {index} has {ecc:g} uncorrected ECC memory errors, over the "
                f"{limits.max_ecc_uncorrected} allowed in pool {pool}"
            )
        if seen.get("remap_failed"):
            problems.append(f"GPU {index} failed to remap a memory row: it needs replacing")
        elif seen.get("remap_pending"):
            problems.append(
                f"GPU {index} has {seen['remap_pending']:g} memory row(s) waiting to be "
                "remapped: it needs a reset"
            )
    return problems
