"""Every queue's waiting and running work now: for the load samples and the dashboards."""

from __future__ import annotations

from django.db.models import Count, Sum

from scheduling.models import Queue, Task, TaskState

WAITING = (TaskState.PENDING, TaskState.WAITING, TaskState.QUEUED)


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
