"""Recent usage per project in fair-share queues, decayed by a half-life (docs/policy.md).

Units: GPU-seconds for work with GPUs, core-seconds for CPU work. Only runs that ended within
four half-lives (or still run) are read: older ones weigh under 1/16 and are left out.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db.models import Q

from scheduling.decisions.order import Run, decayed_usage, share_factors
from scheduling.models import Task
from scheduling.selectors.site import SiteView


def share_factors_for(site: SiteView, queue: str, now: datetime) -> dict[str, float]:
    """Each project's fair-share factor in a `fairshare` queue; {} (all equal) elsewhere."""
    policy = site.queues.get(queue)
    if policy is None or policy.policy != "fairshare":
        return {}
    half_life = settings.SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS * 3600.0
    since = now - timedelta(seconds=4 * half_life)
    rows = (
        Task.objects.filter(queue_id=site.queue_ids[queue], started_at__isnull=False)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=since))
        .values_list("project__slug", "cpus", "gpus", "started_at", "ended_at")
    )
    runs: dict[str, list[Run]] = {}
    for slug, cpus, gpus, started, ended in rows:
        runs.setdefault(slug, []).append(
            Run(
                units=float(gpus or cpus),
                start=cast(datetime, started).timestamp(),
                end=ended.timestamp() if ended else None,
            )
        )
    now_s = now.timestamp()
    usage = {slug: decayed_usage(r, now_s, half_life) for slug, r in runs.items()}
    shares = {slug: float(share) for slug, share in site.shares.items()}
    return share_factors(usage, shares)
