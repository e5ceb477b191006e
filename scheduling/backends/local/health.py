"""The local backend's node check: the host's own load, free disk and GPU temperatures.

Every virtual node of the local backend runs on this one host, so they share its health.
Pluggable: the backend's `health_probe` option names another function (a site's own
checks, or a test's), called as `probe(nodes, root=...)` and returning a NodeHealth by node.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from scheduling.backends.base import NodeHealth

# Lenient on purpose: a shared, busy host must not drain itself. Sites tighten them.
MIN_FREE_DISK_BYTES = 200 << 20
MAX_GPU_TEMPERATURE_C = 90
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
    for index, temperature in enumerate(gpu_temperatures()):
        metrics[f"gpu{index}_c"] = temperature
        if temperature >= MAX_GPU_TEMPERATURE_C:
            problems.append(f"GPU {index} at {temperature:g} °C")
    health = NodeHealth(ok=not problems, reason="; ".join(problems), metrics=metrics)
    return {node: health for node in nodes}


def gpu_temperatures() -> list[float]:
    """Each GPU's temperature from nvidia-smi, or none where there is no nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=temperature.gpu", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [float(line) for line in out.split() if line.strip().replace(".", "", 1).isdigit()]
