"""The local backend's node check: the host's own load, free disk and GPU readings.

Every virtual node of the local backend runs on this one host, so they share its health.
The GPUs' temperatures, uncorrected ECC errors and memory row remapping (nvidia-smi,
gpuwatch.py) are reported as metrics, `gpu<N>_c`, `gpu<N>_ecc`, `gpu<N>_remap_pending` and
`gpu<N>_remap_failed`: the engine's health pass holds them to the limits of each node's pool
(settings.SWITCHYARD_GPU_HEALTH, decisions/gpuhealth.py).
Pluggable: the backend's `health_probe` option names another function (a site's own
checks, or a test's), called as `probe(nodes, root=...)` and returning a NodeHealth by node.
"""

from __future__ import annotations

import os
import shutil

from scheduling.backends import gpuwatch
from scheduling.backends.base import NodeHealth

# Lenient on purpose: a shared, busy host must not drain itself. Sites tighten them.
MIN_FREE_DISK_BYTES = 200 << 20
MAX_LOAD_PER_CORE: float | None = None  # off: a load average alone says little here


def host_probe(nodes: list[str], *, root: str) -> dict[str, NodeHealth]:
    problems = []
    metrics: dict[str, float] = {}
    load = os.getloadavg()[0]
    cores = os.cpu_count() or 1
    metrics["load_per_core"] = round(load / cores, 2)
    if MAX_LOAD_PER_CORE is not None and load / cores > MAX_LOAD_PER_CORE:
        problems.append(f"load {load:.1f} on {cores} cores")
    free = shutil.disk_usage(root).free
    metrics["free_disk_bytes"] = free
    if free < MIN_FREE_DISK_BYTES:
        problems.append(f"only {free >> 20} MiB free on the job disk")
    metrics.update(gpu_readings())
    health = NodeHealth(ok=not problems, reason="; ".join(problems), metrics=metrics)
    return {node: health for node in nodes}


def gpu_readings() -> dict[str, float]:
    """Each GPU's temperature, uncorrected ECC errors and memory rows pending or failed to
    remap, by its index; none where there is no nvidia-smi or it does not answer (a CPU
    node). A reading the GPU does not give is left out (`[N/A]`: ECC off; no row remapper)."""
    smi = shutil.which("nvidia-smi")
    gpus = gpuwatch.parse_gpus((gpuwatch.query(smi, gpuwatch.QUERY_GPU) if smi else None) or "")
    if not gpus or smi is None:
        return {}
    remapped = gpuwatch.parse_remapped(gpuwatch.query(smi, gpuwatch.QUERY_REMAPPED) or "")
    readings: dict[str, float] = {}
    for gpu in gpus:
        pending, failed = remapped.get(gpu["uuid"], (None, None))
        for name, value in (
            ("c", gpu["temperature"]),
            ("ecc", gpu["ecc"]),
            ("remap_pending", pending),
            ("remap_failed", failed),
        ):
            if value is not None:
                readings[f"gpu{gpu['index']}_{name}"] = value
    return readings
