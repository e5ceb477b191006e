"""Public workload traces as simulator jobs and sites (docs/simulation.md).

- Standard Workload Format (`.swf`, Parallel Workloads Archive): rigid parallel jobs; one line
  per job, 18 columns, `;` header lines.
- The Alibaba GPU cluster trace (cluster-trace-gpu-v2023, "openb"): pods with CPU, memory and
  GPU requests, creation, scheduling and deletion times, and the cluster's node list.
"""

from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path

from scheduling.decisions.levels import HIGH, LOW, MEDIUM, LevelRule
from scheduling.decisions.types import NodeView, QueuePolicy
from simulation.simulator.model import SimJob, Site
from simulation.simulator.workloads import job

GIB = 1024


class TraceError(ValueError):
    """A trace line that cannot be read: where, what was expected, what was there."""


# -- SWF ----------------------------------------------------------------------------------


def read_swf(path: str | Path, *, limit: int | None = None, repeat: int = 1) -> list[SimJob]:
    """The trace's jobs, each an HPC job of its processor count (one CPU each; 1 GiB of memory,
    which place() asks on every node a job spans: the model has no memory column).

    Jobs with no runtime or no processors (cancelled before start) are left out. The walltime
    is the requested time, or the runtime where the trace has none (a perfect estimate).
    `repeat` replays the trace that many times back to back (for benchmarks). The user column
    becomes the project, so fair share has someone to share between. What a job runs (its
    command, which with its user and project names the work its runtime is predicted from:
    docs/predictions.md) is the trace's executable number, or where it has none (-1) the
    processors it requested.
    """
    base = _swf_rows(Path(path), limit)
    if not base:
        return []
    span = max(r[1] for r in base) + 1
    jobs = []
    for copy in range(repeat):
        for number, submit, runtime, procs, walltime, user, runs in base:
            key = f"swf-{number}" if repeat == 1 else f"swf-{copy}-{number}"
            jobs.append(
                job(
                    key,
                    "hpc-simulation",
                    "hpc",
                    submit + copy * span,
                    runtime,
                    max(walltime, runtime),
                    cpus=procs,
                    memory_gib=1,
                    project=f"user-{user}" if user > 0 else "swf",
                    user=f"user-{user}" if user > 0 else "swf",
                    command=runs,
                )
            )
    return jobs


def offered_load(jobs: Sequence[SimJob], cores: int) -> float:
    """Work offered over room given: the jobs' processors x runtime summed, over `cores` x the
    span of their arrivals (first submit to last). Infinite where every job arrives at once."""
    if not jobs:
        return 0.0
    span = max(j.submit for j in jobs) - min(j.submit for j in jobs)
    work = sum(j.spec.resources.cpus * j.runtime for j in jobs)
    return work / (cores * span) if span > 0 else math.inf


def at_load(jobs: Sequence[SimJob], cores: int, load: float) -> list[SimJob]:
    """The same jobs with their arrivals stretched (or brought closer) about the first one, so
    that their offered load on `cores` is `load`; runtimes and walltimes are kept."""
    if not (isinstance(load, int | float) and math.isfinite(load) and load > 0):
        raise TraceError(f"load: expected an offered load above 0 (such as 0.7), got {load!r}")
    native = offered_load(jobs, cores)
    if not jobs:
        return []
    if not math.isfinite(native):
        raise TraceError(
            "load: expected a trace whose arrivals span some time, got every job at one moment"
        )
    first, factor = min(j.submit for j in jobs), native / load
    return [dataclasses.replace(j, submit=first + (j.submit - first) * factor) for j in jobs]


def _swf_rows(
    path: Path, limit: int | None
) -> list[tuple[int, float, float, int, float, int, tuple[str, ...]]]:
    rows, at = [], 0
    try:
        with path.open() as lines:
            for at, line in enumerate(lines, 1):  # noqa: B007 - `at` names the bad line below
                if not line.strip() or line.lstrip().startswith(";"):
                    continue
                row = _swf_row(path, at, line.split())
                if row is not None:
                    rows.append(row)
                    if limit is not None and len(rows) >= limit:
                        break
    except UnicodeDecodeError:
        raise TraceError(
            f"{path.name}:{at + 1}: expected text, got bytes that are not UTF-8"
        ) from None
    return rows


def _swf_row(path: Path, at: int, fields: list[str]) -> tuple | None:
    if len(fields) < 18:
        raise TraceError(f"{path.name}:{at}: expected 18 columns, got {len(fields)}")
    try:
        number, submit, runtime = int(fields[0]), float(fields[1]), float(fields[3])
        procs = int(fields[4]) if int(fields[4]) > 0 else int(fields[7])
        asked, user = float(fields[8]), int(fields[11])
        executable, requested = int(fields[13]), int(fields[7])
    except ValueError as exc:
        raise TraceError(f"{path.name}:{at}: expected numbers: {exc}") from None
    if runtime <= 0 or procs <= 0:
        return None  # cancelled before it started
    if executable > 0:
        runs = ("swf-executable", str(executable))
    else:
        runs = ("swf-processors", str(requested if requested > 0 else procs))
    return (number, submit, runtime, procs, asked if asked > 0 else runtime, user, runs)


SWF_CORES = 32 * 8  # swf_site's processors


def swf_site(*, nodes: int = 32, cores: int = 8) -> Site:
    """A plain HPC cluster for SWF traces: `nodes` x `cores` (256 processors by default, as
    the Lublin model), one packed, fair-share queue `hpc`; HPC enters at low level."""
    views = tuple(
        NodeView(f"n{i:03d}", cpus=cores, memory_mib=cores * 2 * GIB, switch=f"sw{i // 16}")
        for i in range(1, nodes + 1)
    )
    queue = QueuePolicy(
        name="hpc",
        pool="cluster",
        task_types=("hpc-simulation",),
        allocation="pack",
        policy="fairshare",
    )
    return Site(
        pools={"cluster": views},
        queues={"hpc": queue},
        level_rules=(LevelRule("hpc-simulation", start=LOW),),
    )


# -- Alibaba GPU trace ------------------------------------------------------------------------


def read_alibaba(
    pods: str | Path, *, limit: int | None = None, compress: float = 1.0
) -> tuple[list[SimJob], dict]:
    """The trace's pods as jobs, and what was left out (counts by reason).

    `compress` > 1 brings arrivals that many times closer together (runtimes unchanged): the
    trace spreads 8,152 pods over 149 days, which leaves its cluster nearly idle.

    Time is the trace's seconds; a pod runs from its scheduling to its deletion. Pods never
    scheduled (Pending at the trace's end) have no runtime and are left out. GPUs are never
    shared here: a pod asking part of a GPU (gpu_milli < 1000) gets a whole one. Latency-
    sensitive pods (qos LS, Guaranteed) are inference; best-effort (BE, Burstable) GPU pods
    are training, CPU-only ones HPC. Walltime is the runtime (a perfect estimate).
    """
    jobs, left_out = [], {"never scheduled": 0}
    path = Path(pods)
    with path.open(newline="") as f:
        for at, row in enumerate(csv.DictReader(f), 2):
            if not row.get("scheduled_time"):
                left_out["never scheduled"] += 1
                continue
            try:
                created, scheduled = float(row["creation_time"]), float(row["scheduled_time"])
                runtime = float(row["deletion_time"]) - scheduled
                cpus = max(1, math.ceil(int(row["cpu_milli"]) / 1000))
                memory, gpus = int(row["memory_mib"]), int(row["num_gpu"])
            except (KeyError, ValueError) as exc:
                raise TraceError(
                    f"{path.name}:{at}: expected the openb pod columns: {exc}"
                ) from None
            if runtime <= 0:
                left_out["no runtime"] = left_out.get("no runtime", 0) + 1
                continue
            latency = row.get("qos") in ("LS", "Guaranteed")
            kind = (
                "ai-inference" if latency and gpus else "ai-training" if gpus else "hpc-simulation"
            )
            jobs.append(
                job(
                    row["name"],
                    kind,
                    "gpu",
                    created / compress,
                    runtime,
                    math.ceil(runtime),
                    cpus=cpus,
                    gpus=gpus,
                    memory_gib=memory / GIB,
                    project=row.get("qos") or "openb",
                )
            )
            if limit is not None and len(jobs) >= limit:
                break
    return jobs, left_out


def alibaba_site(nodes: str | Path, *, share: float = 1.0) -> Site:
    """The trace's GPU nodes as one packed pool `gpu` with one queue `gpu`; training rises
    one level per 10 minutes waiting, inference enters at medium, CPU work at low. With
    `share` < 1, that share of the nodes (evenly spread over the list): the whole cluster
    holds even all 7,255 pods at once."""
    if not 0 < share <= 1:
        raise TraceError(f"share: expected a fraction above 0 and at most 1, got {share}")
    views = []
    path = Path(nodes)
    with path.open(newline="") as f:
        for at, row in enumerate(csv.DictReader(f), 2):
            try:
                views.append(
                    NodeView(
                        row["sn"],
                        cpus=int(row["cpu_milli"]) // 1000,
                        memory_mib=int(row["memory_mib"]),
                        gpus=int(row["gpu"]),
                        gpu_model=row["model"],
                    )
                )
            except (KeyError, ValueError) as exc:
                raise TraceError(
                    f"{path.name}:{at}: expected the openb node columns: {exc}"
                ) from None
    if share < 1:
        step = len(views) / max(1, round(len(views) * share))
        views = [views[int(i * step)] for i in range(max(1, round(len(views) * share)))]
    queue = QueuePolicy(name="gpu", pool="gpu", task_types=(), allocation="pack")
    rules = (
        LevelRule("ai-training", start=MEDIUM, step=+1, every_s=600, limit=HIGH, repeat=True),
        LevelRule("ai-inference", start=MEDIUM),
        LevelRule("hpc-simulation", start=LOW),
    )
    return Site(pools={"gpu": tuple(views)}, queues={"gpu": queue}, level_rules=rules)
