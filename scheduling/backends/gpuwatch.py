"""What a job's GPUs do, read from `nvidia-smi` (docs/operations.md, "GPU use and GPU health").

Two queries, both in NVIDIA's CSV form without header or units: the GPUs (`QUERY_GPU`:
index, UUID, utilisation %, memory used and total in MiB, temperature °C, uncorrected ECC
errors since the driver loaded) and the processes that hold a context on one
(`QUERY_APPS`: host pid, MiB it uses, its GPU's UUID). A job's GPU use is what the processes
of its own tree hold: the GPUs they are on, those GPUs' utilisation, their memory. The local
backend's supervisor (jobwait.py) and the Slurm job's watcher (slurm/watch.py, which runs
this file's source) sample it every few seconds; the node check reads the GPUs alone.

Standard library only, and `subprocess` imported when a sample is taken: the supervisor
imports this by path, and a job without GPUs never pays for it.
"""

from __future__ import annotations

import os

QUERY_GPU = (
    "--query-gpu=index,uuid,utilization.gpu,memory.used,memory.total,temperature.gpu,"
    "ecc.errors.uncorrected.volatile.total"
)
QUERY_APPS = "--query-compute-apps=pid,used_memory,gpu_uuid"
# The node check's third question: a GPU's memory rows waiting to be remapped (a reset applies
# it) or that it failed to remap (no spare rows left): the memory errors of an A100, H100,
# H200. Answered by data-centre GPUs from Ampere on; older ones fail it, and it is not asked.
QUERY_REMAPPED = "--query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure"
CSV = "--format=csv,noheader,nounits"
TIMEOUT_S = 10.0
# A job's sample waits less: its supervisor copies the job's output meanwhile, and a driver
# in trouble can leave nvidia-smi hanging. Such a sample is skipped, not counted.
SAMPLE_TIMEOUT_S = 3.0


def number(text: str) -> float | None:
    """A CSV field as a number; None for what nvidia-smi prints where it has none
    (`[N/A]`, `[Not Supported]`, `[Unknown Error]`)."""
    try:
        return float(text)
    except ValueError:
        return None


def parse_gpus(text: str) -> list[dict]:
    """The `QUERY_GPU` rows: {index, uuid, util, memory_used, memory_total, temperature,
    ecc}, numbers or None. A line that is not one (an error message) is skipped."""
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 7 or not cells[0].isdigit() or not cells[1].startswith("GPU-"):
            continue
        util, used, total, temperature, ecc = (number(c) for c in cells[2:])
        gpus.append(
            {
                "index": int(cells[0]),
                "uuid": cells[1],
                "util": util,
                "memory_used": used,
                "memory_total": total,
                "temperature": temperature,
                "ecc": ecc,
            }
        )
    return gpus


def parse_apps(text: str) -> list[tuple[int, float, str]]:
    """The `QUERY_APPS` rows: (pid, MiB used or 0 where unknown, GPU UUID)."""
    apps = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[0].isdigit() or not cells[2].startswith("GPU-"):
            continue
        apps.append((int(cells[0]), number(cells[1]) or 0.0, cells[2]))
    return apps


def parse_remapped(text: str) -> dict[str, tuple[float | None, float | None]]:
    """The `QUERY_REMAPPED` rows: GPU UUID → (rows pending, a failure), numbers or None.
    Drivers print the two as counts or as Yes/No: both are read."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 3 and cells[0].startswith("GPU-"):
            rows[cells[0]] = (flag(cells[1]), flag(cells[2]))
    return rows


def flag(text: str) -> float | None:
    """A count, or Yes/No as 1/0; None for anything else."""
    said = {"yes": 1.0, "no": 0.0}.get(text.lower())
    return said if said is not None else number(text)


def query(smi: str, what: str, timeout: float = TIMEOUT_S) -> str | None:
    """nvidia-smi's answer to one query, or None where it failed (no driver, no answer)."""
    import subprocess

    try:
        done = subprocess.run(
            [smi, what, CSV],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def find_smi(path: str | None = None) -> str | None:
    """Where `nvidia-smi` is on PATH (or `path`), as shutil.which finds it, or None."""
    for folder in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        candidate = os.path.join(folder or ".", "nvidia-smi")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


class GpuSampler:
    """The GPU use of one job, sampled every `every_s` seconds while it runs.

    Each sample: the GPUs on which its processes (`pids`, host pids) hold a context, those
    GPUs' utilisation and the MiB its processes use on them. `summary()` keeps the figures
    the portal stores per attempt.
    """

    def __init__(self, smi: str, every_s: float, now: float) -> None:
        self.smi = smi
        self.every_s = max(0.5, float(every_s))
        self.next_at = now + min(self.every_s, 1.0)  # the first one soon: short jobs too
        self.samples = 0
        self.busy: set[str] = set()
        self.util_sum = 0.0
        self.util_count = 0
        self.util_peak = 0.0
        self.memory_peak = 0.0

    def due(self, now: float) -> float:
        return max(0.0, self.next_at - now)

    def sample(self, pids: list[int], now: float) -> None:
        self.next_at = now + self.every_s
        apps_text = query(self.smi, QUERY_APPS, SAMPLE_TIMEOUT_S)
        gpus_text = query(self.smi, QUERY_GPU, SAMPLE_TIMEOUT_S) if apps_text is not None else None
        if gpus_text is None:
            return  # nvidia-smi did not answer: no sample, not a sample of nothing
        self.add(parse_gpus(gpus_text), parse_apps(apps_text or ""), set(pids))

    def add(self, gpus: list[dict], apps: list[tuple[int, float, str]], pids: set[int]) -> None:
        self.samples += 1
        mine = [(mib, uuid) for pid, mib, uuid in apps if pid in pids]
        on = {uuid for _, uuid in mine}
        self.busy |= on
        self.memory_peak = max(self.memory_peak, sum(mib for mib, _ in mine))
        for gpu in gpus:
            if gpu["uuid"] in on and gpu["util"] is not None:
                self.util_sum += gpu["util"]
                self.util_count += 1
                self.util_peak = max(self.util_peak, gpu["util"])

    def summary(self) -> dict | None:
        """{samples, gpus_busy, util_mean, util_peak, memory_peak_mib}; None before any
        sample. The utilisation is of the GPUs the job was on, while it was on them."""
        if not self.samples:
            return None
        mean = self.util_sum / self.util_count if self.util_count else 0.0
        return {
            "samples": self.samples,
            "gpus_busy": len(self.busy),
            "util_mean": round(mean, 1),
            "util_peak": round(self.util_peak, 1),
            "memory_peak_mib": round(self.memory_peak),
        }
