"""What the local backend accounts for a finished job: its booked allocation × the times its
supervisor wrote (docs/accounting.md), with the CPU time and GPU use it measured
(docs/operations.md). Kept in the job's final state, which outlives the job's folder
(retention keeps `logs/<key>.json`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from scheduling.backends.base import Run
from scheduling.decisions.types import GpuUse


def runs(key: str, state: Mapping[str, Any]) -> list[Run]:
    """One run, or none for a job that never started."""
    started, ended = _time(state.get("started_at")), _time(state.get("ended_at"))
    alloc = state.get("alloc") or {}
    if started is None or ended is None or not alloc:
        return []
    return [
        Run(
            job_id=key,
            key=key,
            cpus=int(alloc.get("cpus", 0)),
            gpus=int(alloc.get("gpus", 0)),
            memory_mib=int(alloc.get("memory_mib", 0)),
            nodes=int(alloc.get("nodes", 0)),
            elapsed_ms=max(0, round((ended - started).total_seconds() * 1000)),
            started_at=started,
            ended_at=ended,
            cpu_ms=int(state["cpu_ms"]) if state.get("cpu_ms") is not None else None,
            gpu=GpuUse.from_dict(state.get("gpu")),
        )
    ]


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
