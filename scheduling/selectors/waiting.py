"""One answer to "why is my task waiting?", for the task page and the API.

The first thing that holds it (its dependencies, its trigger file, a quota with its numbers,
the dispatcher, the backend's own reason), its level and why, its position among the queue's
waiting tasks in the order they will start, a pending priority request, and an estimated
start where one can be computed (docs/policy.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from portal.models import Project
from scheduling.decisions.estimate import Ahead, Busy, estimate_start
from scheduling.decisions.levels import LEVELS
from scheduling.models import Hold, PriorityRequest, Task, TaskState
from scheduling.selectors import site_view
from scheduling.selectors.fairshare import share_factors_for
from scheduling.selectors.occupancy import running_on
from scheduling.selectors.policy import ordered, site_minute
from scheduling.spec import TaskSpec

S = TaskState
_UNSTARTED = (S.PENDING, S.WAITING, S.QUEUED)


@dataclass(frozen=True, slots=True)
class Explanation:
    kind: str  # dependency | trigger | quota | dispatcher | backend | cancelling
    message: str
    level: str
    level_reason: str
    position: int | None = None  # 1 = next to start in its queue
    waiting_in_queue: int | None = None
    pending_request: int | None = None  # a priority request awaiting a decision
    estimated_start: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.estimated_start is not None:
            data["estimated_start"] = self.estimated_start.isoformat()
        return data


def explain(task: Task, now: datetime | None = None) -> Explanation | None:
    """Why `task` waits now, or None once it runs or has ended."""
    if task.state not in _UNSTARTED:
        return None
    now = now or timezone.now()
    if task.cancelling:
        kind = "cancelling"
    elif task.state == S.WAITING:
        kind = task.hold or Hold.DEPENDENCY
    elif task.state == S.PENDING:
        kind = "dispatcher"
    else:
        kind = "backend"
    pending = (
        PriorityRequest.objects.filter(task=task, state=PriorityRequest.State.PENDING)
        .values_list("pk", flat=True)
        .first()
    )
    position = waiting = estimated = None
    if kind in ("quota", "dispatcher", "backend"):
        position, waiting, ahead = _position(task, now)
        estimated = _estimate(task, ahead, now)
    return Explanation(
        kind=kind,
        message=task.reason,
        level=LEVELS[task.level],
        level_reason=task.level_reason,
        position=position,
        waiting_in_queue=waiting,
        pending_request=pending,
        estimated_start=estimated,
    )


def _position(task: Task, now: datetime) -> tuple[int | None, int, list[Task]]:
    """Its place among the queue's tasks that wait to start (held by quota, or queued)."""
    site = site_view()
    queue = task.queue.name
    peers = list(
        Task.objects.filter(queue_id=task.queue_id)
        .filter(Q(state__in=(S.PENDING, S.QUEUED)) | Q(state=S.WAITING, hold=Hold.QUOTA))
        .only("id", "type", "level", "ready_at", "submitted_at", "project_id", "spec")
    )
    slugs = dict(
        Project.objects.filter(pk__in={t.project_id for t in peers}).values_list("pk", "slug")
    )
    for peer in peers:
        peer.project_slug = slugs.get(peer.project_id, "")  # type: ignore[attr-defined]  # read back with getattr by ordered()
    shares = share_factors_for(site, queue, now)
    order = ordered(site, peers, queue=queue, shares=shares, minute=site_minute(now))
    ids = [t.pk for t in order]
    if task.pk not in ids:
        return None, len(ids), []
    index = ids.index(task.pk)
    return index + 1, len(ids), order[:index]


def _estimate(task: Task, ahead: list[Task], now: datetime) -> datetime | None:
    site = site_view()
    queue = site.queues.get(task.queue.name)
    if queue is None:
        return None
    nodes = site.pool_nodes.get(queue.pool, ())
    busy = []
    for occupant in running_on({n.name for n in nodes}):
        spec = TaskSpec.from_dict(occupant.task.spec)
        ends = occupant.started_at + spec.walltime_s if spec.walltime_s else None
        busy += [Busy(allocation, ends) for allocation in occupant.allocations]
    start = estimate_start(
        TaskSpec.from_dict(task.spec),
        queue,
        nodes,
        busy,
        [Ahead(TaskSpec.from_dict(t.spec), queue) for t in ahead],
        now.timestamp(),
    )
    return datetime.fromtimestamp(start, tz=UTC) if start is not None else None
