"""The portal's own history as a simulator workload, on the site as it is configured now.

"Replay last week": every task submitted in the window that ran, with the runtime it really
had (a task still running counts what it has run so far); tasks that never started have no
runtime and are left out, counted by state. docs/simulation.md.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from scheduling.models import LeaseSchedule, Node, Task
from scheduling.sites.types import LeaseTemplate
from scheduling.spec import TaskSpec
from scheduling.usage import node_view, site_minute, site_view
from simulation.simulator.model import SimJob, Site


def history_workload(
    days: float = 7, *, now: datetime | None = None, queues: list[str] | None = None
) -> tuple[list[SimJob], Site, dict]:
    """The last `days` of tasks as jobs (t = 0 at the window's start), the site, and what was
    left out (by state); with `queues`, only those queues' tasks."""
    now = now or timezone.now()
    since = now - timedelta(days=days)
    jobs: list[SimJob] = []
    left_out: Counter[str] = Counter()
    tasks = Task.objects.filter(submitted_at__gte=since, submitted_at__lt=now)
    if queues is not None:
        tasks = tasks.filter(queue__name__in=queues)
    rows = tasks.select_related("project", "queue", "owner").order_by("submitted_at", "pk")
    for task in rows.iterator(chunk_size=2000):
        if task.started_at is None:
            left_out[f"never started ({task.state})"] += 1
            continue
        runtime = ((task.ended_at or now) - task.started_at).total_seconds()
        spec = TaskSpec.from_dict(task.spec)
        spec = dataclasses.replace(
            spec, type=task.type, queue=task.queue.name, project=task.project.slug
        )
        jobs.append(
            SimJob(
                f"task-{task.pk}",
                spec,
                task.type,
                task.queue.name,
                (task.submitted_at - since).total_seconds(),
                max(runtime, 0.0),
                task.owner.get_username(),
            )
        )
    return jobs, portal_site(start=since), dict(left_out)


def portal_site(*, start: datetime) -> Site:
    """The site as configured now (every node up, no lease open), its clock at `start`."""
    view = site_view(fresh=True)
    pools: dict[str, list] = {}
    for node in Node.objects.select_related("pool").order_by("name"):
        up = dataclasses.replace(node_view(node), available=True, available_until=None)
        pools.setdefault(node.pool.name, []).append(up)
    leases = tuple(
        LeaseTemplate(s.pool.name, s.queue.name, s.count, s.start.strftime("%H:%M"), s.duration_s)
        for s in LeaseSchedule.objects.filter(enabled=True).select_related("pool", "queue")
    )
    return Site(
        pools={name: tuple(nodes) for name, nodes in pools.items()},
        queues=dict(view.queues),
        level_rules=view.level_rules,
        weights=dict(view.weights),
        quotas=tuple(rule for rules in view.quotas.values() for rule in rules),
        leases=leases,
        shares={slug: float(share) for slug, share in view.shares.items()},
        half_life_s=settings.SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS * 3600.0,
        start_minute=site_minute(start),
        preempt_after_s=float(settings.SWITCHYARD_PREEMPT_AFTER_S),
    )
