"""What `/metrics` reads of the scheduler when it is scraped: a few grouped queries, so a
scrape every 15 s costs the database little however many tasks wait (docs/operations.md).

Labels are queue, pool, level, type and state names: the site's own, few.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min, Sum

from scheduling.models import LIVE_SANDBOX_STATES, Node, Sandbox, Task, TaskState
from scheduling.selectors.load import WAITING


@dataclass(frozen=True, slots=True)
class TaskGroup:
    """Active tasks of one queue, pool, type, level and state."""

    queue: str
    pool: str
    type: str
    level: int
    running: bool
    count: int
    cpus: int
    gpus: int
    ready_since: datetime | None  # the earliest a waiting one could run (None: all held)


@dataclass(frozen=True, slots=True, order=True)
class NodeGroup:
    pool: str
    state: str
    count: int
    cpus: int
    gpus: int


def active_task_groups() -> list[TaskGroup]:
    """Waiting and running tasks, grouped: one query."""
    rows = (
        Task.objects.filter(state__in=(*WAITING, TaskState.RUNNING))
        .order_by()
        .values("queue__name", "queue__pool__name", "type", "level", "state")
        .annotate(n=Count("id"), cpus=Sum("cpus"), gpus=Sum("gpus"), since=Min("ready_at"))
    )
    groups: dict[tuple, list] = {}
    for row in rows:
        running = row["state"] == TaskState.RUNNING
        key = (row["queue__name"], row["queue__pool__name"], row["type"], row["level"], running)
        entry = groups.setdefault(key, [0, 0, 0, None])
        entry[0] += row["n"]
        entry[1] += row["cpus"] or 0
        entry[2] += row["gpus"] or 0
        if row["since"] is not None and (entry[3] is None or row["since"] < entry[3]):
            entry[3] = row["since"]
    return [
        TaskGroup(queue, pool, task_type, level, running, *entry)
        for (queue, pool, task_type, level, running), entry in sorted(groups.items())
    ]


def node_groups() -> list[NodeGroup]:
    """Nodes by pool and state, with their cores and GPUs: one query."""
    rows = (
        Node.objects.order_by()
        .values("pool__name", "state")
        .annotate(n=Count("id"), cpus=Sum("cpus"), gpus=Sum("gpus"))
    )
    return sorted(
        NodeGroup(r["pool__name"], r["state"], r["n"], r["cpus"] or 0, r["gpus"] or 0) for r in rows
    )


def live_sandboxes() -> dict[str, int]:
    """Live sandboxes by state (starting, ready, queued)."""
    rows = (
        Sandbox.objects.filter(state__in=LIVE_SANDBOX_STATES)
        .order_by()
        .values("state")
        .annotate(n=Count("id"))
    )
    return {row["state"]: row["n"] for row in rows}
