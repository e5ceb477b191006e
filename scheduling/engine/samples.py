"""Load samples: every queue's waiting and running work, once a minute (docs/console.md).

One grouped query over the unfinished tasks (the state index keeps it off the finished
ones), one row per queue. The admins' dashboard draws utilisation and queue depth over time
from them; a month of samples is kept.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Count, Sum
from django.utils import timezone

from scheduling.models import LoadSample, Queue, Task, TaskState

WAITING = (TaskState.PENDING, TaskState.WAITING, TaskState.QUEUED)
KEEP = timedelta(days=31)


def load_now(queue_ids: list[int] | None = None) -> dict[int, list[int]]:
    """queue id → [waiting, running, cpus busy, gpus busy], now: one grouped query."""
    tasks = Task.objects.filter(state__in=(*WAITING, TaskState.RUNNING))
    queues = Queue.objects.all()
    if queue_ids is not None:
        tasks, queues = tasks.filter(queue_id__in=queue_ids), queues.filter(pk__in=queue_ids)
    rows = (
        tasks.order_by()
        .values("queue_id", "state")
        .annotate(n=Count("id"), cpus=Sum("cpus"), gpus=Sum("gpus"))
    )
    load: dict[int, list[int]] = {q: [0, 0, 0, 0] for q in queues.values_list("pk", flat=True)}
    for row in rows:
        entry = load.setdefault(row["queue_id"], [0, 0, 0, 0])
        if row["state"] == TaskState.RUNNING:
            entry[1] += row["n"]
            entry[2] += row["cpus"] or 0
            entry[3] += row["gpus"] or 0
        else:
            entry[0] += row["n"]
    return load


def take_sample(now: datetime | None = None) -> int:
    now = now or timezone.now()
    load = load_now()
    LoadSample.objects.bulk_create(
        LoadSample(at=now, queue_id=q, waiting=w, running=r, cpus_busy=c, gpus_busy=g)
        for q, (w, r, c, g) in load.items()
    )
    LoadSample.objects.filter(at__lt=now - KEEP).delete()
    return len(load)
