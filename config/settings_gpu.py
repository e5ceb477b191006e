"""Settings of GPU use and GPU health (docs/operations.md, "GPU use and GPU health").

Part of config/settings.py, which imports every name here by name.
"""

from __future__ import annotations

import json

from django.core.exceptions import ImproperlyConfigured

from config.env import env_int, env_str

# How often a GPU job's supervisor (local) or watcher (Slurm) asks nvidia-smi what its GPUs
# do: each sample is two short nvidia-smi calls on the job's node.
SWITCHYARD_GPU_SAMPLE_S = env_int("SWITCHYARD_GPU_SAMPLE_S", 10)


def _gpu_health() -> dict[str, dict[str, float]]:
    """The node check's GPU limits by pool name ("*": every pool without its own), from
    SWITCHYARD_GPU_HEALTH, JSON: {"*": {"max_temperature_c": 90}, "gpu-train":
    {"max_temperature_c": 85, "max_ecc_uncorrected": 0}}."""
    text = env_str("SWITCHYARD_GPU_HEALTH", "")
    if not text:
        return {"*": {"max_temperature_c": 90, "max_ecc_uncorrected": 0}}
    try:
        table = json.loads(text)
    except ValueError as exc:
        raise ImproperlyConfigured(f"SWITCHYARD_GPU_HEALTH: expected JSON, got {exc}") from None
    problem = limits_error(table)
    if problem:
        raise ImproperlyConfigured(f"SWITCHYARD_GPU_HEALTH: {problem}")
    return table


def limits_error(table: object) -> str | None:
    """Why a limits table (pool name or "*" → {field: number}) is not one, or None."""
    known = ("max_temperature_c", "max_ecc_uncorrected")  # decisions/gpuhealth.py reads them
    if not isinstance(table, dict):
        return f"expected an object of pool names, got {type(table).__name__}"
    for pool, limits in table.items():
        if not isinstance(limits, dict):
            return f"{pool}: expected an object of limits, got {type(limits).__name__}"
        for field, value in limits.items():
            if field not in known:
                return f"{pool}.{field}: expected one of {', '.join(known)}"
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                return f"{pool}.{field}: expected a number ≥ 0, got {value!r}"
    return None


SWITCHYARD_GPU_HEALTH = _gpu_health()
