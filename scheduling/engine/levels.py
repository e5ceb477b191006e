"""The policy pass: levels move, approvals expire, quota-held tasks are reconsidered.

Run by beat every `SWITCHYARD_POLICY_MS` and, for the tasks concerned, at once when a
priority request is decided. Every level change is a task event; a queued task's new number
reaches its backend (`set_priority`: the local backend's start order, Slurm's job priority).
The clock is a parameter, so tests move it instead of sleeping. docs/policy.md.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from django.db.models import Q
from django.utils import timezone

from config.bulk import bulk_insert
from portal.notify import notify
from scheduling.backends import BackendError
from scheduling.decisions.levels import LEVELS, Level
from scheduling.decisions.order import OVERDUE, OVERDUE_VALUE, overdue_reason
from scheduling.engine.admission import release_held
from scheduling.engine.registry import get_backend
from scheduling.models import PriorityRequest, Task, TaskEvent, TaskState
from scheduling.selectors import site_view
from scheduling.selectors.fairshare import share_factors_for
from scheduling.selectors.policy import READY, past_bound, site_minute, task_level, task_value

log = logging.getLogger(__name__)
# A floor's key: a task id, or a (project id, queue id) scope.
K = TypeVar("K")
S = TaskState
UNSTARTED = (S.PENDING, S.WAITING, S.QUEUED)


@dataclass(slots=True)
class _Row:
    """What the pass reads of a task: plain values, not a model instance (building 10,000 task,
    project and queue instances was most of a pass)."""

    pk: int
    type: str
    state: str
    priority: str
    level: int
    level_reason: str
    priority_value: int
    ready_at: datetime | None
    backend: str
    backend_id: str
    project_id: int
    queue_id: int
    project: str
    queue: str
    canary_id: int | None
    borrowed: str


_FIELDS = (
    "id",
    "type",
    "state",
    "priority",
    "level",
    "level_reason",
    "priority_value",
    "ready_at",
    "backend",
    "backend_id",
    "project_id",
    "queue_id",
    "project__slug",
    "queue__name",
    "canary_id",
    "borrowed",
)


@dataclass(frozen=True, slots=True)
class PassResult:
    relevelled: int
    expired: int
    released: int


def policy_pass(now: datetime | None = None) -> PassResult:
    now = now or timezone.now()
    expired = expire_requests(now)
    relevelled = relevel(now)
    released = release_held(now=now)
    return PassResult(relevelled, expired, released)


def relevel(now: datetime | None = None, *, tasks: Q | None = None) -> int:
    """Bring every unstarted task's level and number up to date. Returns level changes."""
    now = now or timezone.now()
    site = site_view()
    minute = site_minute(now)
    floors_task, floors_scope = _floors(now)
    unstarted = Task.objects.filter(state__in=UNSTARTED)
    if tasks is not None:
        unstarted = unstarted.filter(tasks)
    rows = [_Row(*values) for values in unstarted.values_list(*_FIELDS)]
    shares = {q: share_factors_for(site, q, now) for q in {t.queue for t in rows}}
    changed, events, pushes = [], [], defaultdict(list)
    moved = 0
    for task in rows:
        queue = task.queue
        floor = max(
            (
                f
                for f in (
                    floors_task.get(task.pk),
                    floors_scope.get((task.project_id, task.queue_id)),
                )
                if f
            ),
            default=None,
            key=lambda f: f[0],
        )
        arm = site.arm(task.canary_id)
        lvl = task_level(
            arm,
            task_type=task.type,
            queue=queue,
            ready_at=task.ready_at or now,
            priority=task.priority,
            now=now,
            floor=floor,
        )
        # Past its queue's bound it goes first, and nothing passes it (docs/policy.md); a
        # held task's wait does not count.
        bound = (
            past_bound(arm, queue=queue, ready_at=task.ready_at or now, now=now)
            if task.state in READY
            else None
        )
        value = task_value(
            site,
            level=OVERDUE if bound is not None else lvl.level,
            task_type=task.type,
            queue=queue,
            share=shares[queue].get(task.project, 1.0),
            minute=minute,
            borrowed=bool(task.borrowed),
        )
        said = []
        if value == OVERDUE_VALUE != task.priority_value:
            said.append(overdue_reason(queue, bound))
        if lvl.level != task.level:
            said.append(f"level {LEVELS[task.level]} → {lvl.name}: {lvl.reason}")
            moved += 1
        if bound is not None:
            lvl = Level(lvl.level, f"{lvl.reason}; {overdue_reason(queue, bound)}")
        events += [
            TaskEvent(
                task_id=task.pk, at=now, from_state=task.state, to_state=task.state, message=m
            )
            for m in said
        ]
        if (lvl.level, lvl.reason, value) != (task.level, task.level_reason, task.priority_value):
            task.level, task.level_reason = lvl.level, lvl.reason
            if value != task.priority_value and task.state == S.QUEUED and task.backend_id:
                pushes[task.backend].append((task.backend_id, value))
            task.priority_value = value
            changed.append(task)
    # One UPDATE per distinct (level, reason, number): a handful per pass, however many tasks.
    groups: dict[tuple[int, str, int], list[int]] = defaultdict(list)
    for task in changed:
        groups[(task.level, task.level_reason, task.priority_value)].append(task.pk)
    for (lvl_, reason, value), ids in groups.items():
        for start in range(0, len(ids), 5000):
            Task.objects.filter(pk__in=ids[start : start + 5000]).update(
                level=lvl_, level_reason=reason, priority_value=value
            )
    bulk_insert(events)  # COPY on PostgreSQL (config/bulk.py)
    for alias, jobs in pushes.items():
        _push(alias, jobs)
    return moved


def _push(alias: str, jobs: list[tuple[str, int]]) -> None:
    backend = get_backend(alias)
    for backend_id, value in jobs:
        try:
            backend.set_priority(backend_id, value)
        except BackendError as exc:
            # The job may have started or ended meanwhile; the next pass tries again if not.
            log.info("could not set the priority of %s on %s: %s", backend_id, alias, exc)


def _floors(now: datetime):
    """Approved raises in force: by task id, and by (project id, queue id)."""
    by_task: dict[int, tuple[int, datetime, str]] = {}
    by_scope: dict[tuple[int, int], tuple[int, datetime, str]] = {}
    approved = PriorityRequest.objects.filter(
        state=PriorityRequest.State.APPROVED, until__gt=now
    ).select_related("decided_by")
    for request in approved:
        who = request.decided_by.get_username() if request.decided_by else "an admin"
        floor = (
            request.level,
            request.until,
            f"raised to {LEVELS[request.level]} by request #{request.pk}, approved by {who}, "
            f"until {request.until:%Y-%m-%d %H:%M} UTC",
        )
        if request.task_id:
            _raise_floor(by_task, request.task_id, floor)
        else:
            _raise_floor(by_scope, (request.project_id, request.queue_id), floor)
    return by_task, by_scope


def _raise_floor(
    floors: dict[K, tuple[int, datetime, str]], key: K, floor: tuple[int, datetime, str]
) -> None:
    """Keep the highest approved level for each task or (project, queue)."""
    if key not in floors or floors[key][0] < floor[0]:
        floors[key] = floor


def expire_requests(now: datetime | None = None) -> int:
    """Requests whose time is up: approved ones end (the level reverts in the same pass),
    pending ones lapse. The requester is told."""
    now = now or timezone.now()
    due = list(
        PriorityRequest.objects.filter(
            state__in=[PriorityRequest.State.APPROVED, PriorityRequest.State.PENDING],
            until__lte=now,
        ).select_related("requester")
    )
    for request in due:
        was = request.state
        if not PriorityRequest.objects.filter(pk=request.pk, state=was).update(
            state=PriorityRequest.State.EXPIRED, ended_at=now
        ):
            continue
        what = "its raise ended" if was == PriorityRequest.State.APPROVED else "it was not decided"
        if request.task_id is not None:  # not a request for a project's tasks
            state = Task.objects.filter(pk=request.task_id).values_list("state", flat=True).first()
            if state:
                TaskEvent.objects.create(
                    task_id=request.task_id,
                    at=now,
                    from_state=state,
                    to_state=state,
                    message=f"priority request #{request.pk} expired: {what}",
                )
        notify(
            request.requester,
            f"priority request #{request.pk} expired",
            f"Your request #{request.pk} for level {LEVELS[request.level]} expired at "
            f"{request.until:%Y-%m-%d %H:%M} UTC: {what}.",
        )
    return len(due)
