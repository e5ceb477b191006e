"""GPU use per pool, as measured (docs/operations.md, "GPU use and GPU health"): what a
dashboard or a metrics exporter shows beside the GPUs allocated.

An attempt's GPU use is stored when it is metered, after it ends; so these figures cover
ended attempts, a few seconds to a meter pass late, never the jobs running now.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from scheduling.models import Attempt


def used_gpus_by_pool(*, since: datetime, until: datetime | None = None) -> dict[str, float]:
    """Pool name → the GPUs its jobs were seen using, on average over [since, until): each
    measured attempt's busy GPUs × the share of the window it ran in. Pools without a
    measured attempt in the window are left out."""
    until = until or timezone.now()
    window = (until - since).total_seconds()
    if window <= 0:
        return {}
    rows = Attempt.objects.filter(
        gpu_samples__gt=0, gpu_busy__gt=0, started_at__lt=until, ended_at__gt=since
    ).values_list("task__queue__pool__name", "gpu_busy", "started_at", "ended_at")
    used: dict[str, float] = {}
    for pool, busy, started, ended in rows:
        if busy is None or started is None or ended is None:
            continue  # not in the filter's reach: the fields are nullable
        overlap = (min(ended, until) - max(started, since)).total_seconds()
        used[pool] = used.get(pool, 0.0) + busy * max(0.0, overlap) / window
    return {pool: round(gpus, 3) for pool, gpus in used.items()}


def used_gpus_last_hour() -> dict[str, float]:
    """`used_gpus_by_pool` over the last hour: a gauge a scrape can read."""
    now = timezone.now()
    return used_gpus_by_pool(since=now - timedelta(hours=1), until=now)
