"""What the capacity tests on the fake backend share: task shapes, a pool of one inference
node (the `one_inference_node` fixture, conftest.py), a task submitted and queued (at a level), started on nodes, the clock a little later, a
lease of inference nodes to training."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.models import NodeLease, Pool, Queue, Task
from scheduling.services.capacity import open_lease
from tests.conftest import descriptor, submit

INFERENCE = {"type": "ai-inference", "walltime": "10m", "resources": {"gpus": 1, "cpus": 1}}
TRAINING = {
    "type": "ai-training",
    "estimate": "1h",
    "walltime": "2h",
    "resources": {"nodes": 1, "gpus": 4, "cpus": 8, "memory": "8Gi"},
}


def submit_queued(api, name: str, level: int | None = None, **fields) -> Task:
    response = submit(api, descriptor(name=name, **fields))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    if level is not None:
        Task.objects.filter(pk=task.pk).update(level=level)
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    assert task.state == "queued", task.reason
    return task


def run_on(task: Task, *nodes: str) -> Task:
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, nodes=nodes)
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "running"
    return task


def later(seconds: float = 1) -> datetime:
    return timezone.now() + timedelta(seconds=seconds)


def lend(count: int = 2, hours: float = 4) -> NodeLease:
    return open_lease(
        pool=Pool.objects.get(name="inference-agent"),
        queue=Queue.objects.select_related("pool").get(name="training"),
        count=count,
        duration_s=int(hours * 3600),
    )
