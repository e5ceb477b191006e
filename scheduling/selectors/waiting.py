"""One answer to "why is my task waiting?", for the task page and the API.

The first thing that holds it (its dependencies, its trigger file, a quota with its numbers,
the dispatcher, the backend's own reason), its level and why, its position among the queue's
waiting tasks in the order they will start, a pending priority request, and an estimated
start where one can be computed, with what it waits for (docs/policy.md): a task its quota
holds could start once its project's holders reach their walltimes and free enough quota,
then as the pool replay finds room; a task the backend has reserved room for, at its
reservation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from portal.models import Project
from scheduling import hooks
from scheduling.decisions.estimate import Ahead, Busy, estimate_start
from scheduling.decisions.estimate_quota import Held, Holder, Release, quota_releases
from scheduling.decisions.levels import LEVELS
from scheduling.decisions.quota import BUDGETS, Ask
from scheduling.decisions.reserve import reserved_at
from scheduling.decisions.types import NodeView
from scheduling.models import TERMINAL_STATES, Hold, PriorityRequest, Task, TaskState
from scheduling.selectors import site_view
from scheduling.selectors.fairshare import share_factors_for
from scheduling.selectors.occupancy import running_on
from scheduling.selectors.policy import ordered, site_minute
from scheduling.selectors.quota import with_budgets
from scheduling.selectors.site import SiteView
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
    waits_for: str | None = None  # what the estimate waits for, where it is not the pool alone

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
    position = waiting = estimated = waits_for = None
    if kind in ("quota", "dispatcher", "backend"):
        position, waiting, order = _position(task, now)
        estimated, waits_for = _estimate(task, order, now)
    return Explanation(
        kind=kind,
        message=task.reason,
        level=LEVELS[task.level],
        level_reason=task.level_reason,
        position=position,
        waiting_in_queue=waiting,
        pending_request=pending,
        estimated_start=estimated,
        waits_for=waits_for,
    )


def _position(task: Task, now: datetime) -> tuple[int | None, int, list[Task]]:
    """Its place among the queue's tasks that wait to start (held by quota, or queued), and
    all of them in the order they will start."""
    order = _queue_order(task.queue_id, task.queue.name, now)
    ids = [t.pk for t in order]
    if task.pk not in ids:
        return None, len(ids), order
    return ids.index(task.pk) + 1, len(ids), order


def positions(tasks: list[Task], now: datetime | None = None) -> dict[int, tuple[int, int]]:
    """Each waiting task's (position, tasks waiting) in its queue, one ordering per queue:
    for a list of tasks (a priority-request inbox) without a pass per task."""
    now = now or timezone.now()
    queues = {t.queue_id: t.queue.name for t in tasks if t.state in _UNSTARTED}
    out: dict[int, tuple[int, int]] = {}
    for queue_id, name in queues.items():
        order = _queue_order(queue_id, name, now)
        for index, peer in enumerate(order, 1):
            out[peer.pk] = (index, len(order))
    return out


def _queue_order(queue_id: int, queue: str, now: datetime) -> list[Task]:
    """The queue's tasks that wait to start, in the order they will start."""
    site = site_view()
    peers = list(
        Task.objects.filter(queue_id=queue_id)
        .filter(Q(state__in=(S.PENDING, S.QUEUED)) | Q(state=S.WAITING, hold=Hold.QUOTA))
        .select_related("owner")
        .only(
            "id", "type", "level", "ready_at", "submitted_at", "project_id", "spec", "state",
            "gpus", "cpus", "owner__username", "borrowed",
        )
    )  # fmt: skip
    slugs = dict(
        Project.objects.filter(pk__in={t.project_id for t in peers}).values_list("pk", "slug")
    )
    for peer in peers:
        peer.project_slug = slugs.get(peer.project_id, "")  # type: ignore[attr-defined]  # read back with getattr by ordered()
    shares = share_factors_for(site, queue, now)
    return ordered(site, peers, queue=queue, shares=shares, minute=site_minute(now), now=now)


PoolStart = Callable[..., float | None]


def _estimate(task: Task, order: list[Task], now: datetime) -> tuple[datetime | None, str | None]:
    """When it could start, and what that waits for (None: the pool alone, or nothing)."""
    reserved = reserved_at(task.reason)
    if reserved is not None:
        return reserved, None  # its reason says the reservation already
    site = site_view()
    queue = site.queues.get(task.queue.name)
    ids = [t.pk for t in order]
    if queue is None or task.pk not in ids:
        return None, None
    nodes = site.pool_nodes.get(queue.pool, ())
    busy = pool_busy(nodes)
    t0 = now.timestamp()

    def pool_start(spec: TaskSpec, ahead: list[Ahead], not_before: float = 0.0) -> float | None:
        return estimate_start(spec, queue, nodes, busy, ahead, t0, not_before=not_before)

    releases = _releases(site, task, order, t0, pool_start)
    ahead = []
    for peer in order[: ids.index(task.pk)]:
        if peer.state != S.WAITING:
            ahead.append(Ahead(TaskSpec.from_dict(peer.spec), queue))
        elif (release := releases.get(peer.pk)) is not None:
            ahead.append(Ahead(TaskSpec.from_dict(peer.spec), queue, release.at))
        # else its quota frees at an unknown time: it takes no room in the replay
    spec = TaskSpec.from_dict(task.spec)
    if task.state != S.WAITING:
        start = pool_start(spec, ahead)
        return _when(start), None
    release = releases.get(task.pk)
    if release is None and task.pk in releases and _allocation_holds(task, now.timestamp()):
        return None, (
            "held by its project's allocation; no estimate: it starts once an allocation "
            "covers it (a platform admin grants more or a renewal, or the next one begins)"
        )
    if release is None:
        return None, (
            "held by quota; no estimate: what holds the quota has no walltime, or a budget "
            "holds it until its next period"
        )
    start = pool_start(spec, ahead, release.at)
    return _when(start), _held_text(release, start, queue.pool, now)


def pool_busy(nodes: Sequence[NodeView]) -> list[Busy]:
    """What runs on `nodes` now, each allocation until its task's walltime ends (None: no
    walltime, an unknown end)."""
    busy = []
    for occupant in running_on({n.name for n in nodes}):
        spec = TaskSpec.from_dict(occupant.task.spec)
        ends = occupant.started_at + spec.walltime_s if spec.walltime_s else None
        busy += [Busy(allocation, ends) for allocation in occupant.allocations]
    return busy


def _releases(
    site: SiteView, task: Task, order: list[Task], now: float, pool_start: PoolStart
) -> dict[int, Release | None]:
    """When each quota-held task of the queue is let in by its project's quota, replaying
    what its project holds (running: its start plus walltime; admitted, not yet started: its
    pool estimate plus walltime)."""
    held = [t for t in order if t.state == S.WAITING]
    if not held:
        return {}
    holding = list(
        Task.objects.filter(queue_id=task.queue_id, admitted=True)
        .exclude(state__in=TERMINAL_STATES)
        .select_related("project", "owner")
        .only("id", "state", "spec", "started_at", "gpus", "cpus", "project__slug", "owner__username")
    )  # fmt: skip
    queue = task.queue.name
    releases: dict[int, Release | None] = {}
    for slug in {getattr(t, "project_slug", "") for t in held}:
        rules = site.quota_rules(slug, queue)
        holders = [
            Holder(h.pk, _ask(h, slug, queue), _planned_end(h, now, pool_start))
            for h in holding
            if h.project.slug == slug
        ]
        waiting = [
            Held(t.pk, _ask(t, slug, queue), TaskSpec.from_dict(t.spec).walltime_s)
            for t in held
            if getattr(t, "project_slug", "") == slug
        ]
        spent = None
        if any(r.resource in BUDGETS for r in rules):
            budgets = [r for r in rules if r.resource in BUDGETS]
            spent = with_budgets({}, budgets, datetime.fromtimestamp(now, tz=UTC))
        releases.update(quota_releases(rules, holders, waiting, now, spent=spent))
    known: dict[tuple, bool] = {}
    for t in held:  # what its allocation holds is let in at no time a replay can tell
        if _allocation_holds(t, now, known):
            releases[t.pk] = None
    return releases


def _allocation_holds(task: Task, now: float, known: dict[tuple, bool] | None = None) -> bool:
    """Whether the project's allocation holds the task (asked once per project and kind of
    task when `known` is shared)."""
    slug = getattr(task, "project_slug", "") or task.project.slug
    key = (slug, task.gpus > 0, task.cpus > 0)
    known = {} if known is None else known
    if key not in known:
        when = datetime.fromtimestamp(now, tz=UTC)
        known[key] = hooks.allocation_hold(slug, task.gpus, task.cpus, when) is not None
    return known[key]


def _ask(task: Task, project: str, queue: str) -> Ask:
    return Ask(project, queue, task.owner.get_username(), gpus=task.gpus, cpus=task.cpus)


def _planned_end(task: Task, now: float, pool_start: PoolStart) -> float | None:
    spec = TaskSpec.from_dict(task.spec)
    if not spec.walltime_s:
        return None
    if task.state == S.RUNNING and task.started_at is not None:
        return task.started_at.timestamp() + spec.walltime_s
    start = pool_start(spec, [])
    return start + spec.walltime_s if start is not None else None


def _held_text(release: Release, start: float | None, pool: str, now: datetime) -> str:
    """`held by quota until task #12 (walltime ends 15:40 UTC) ends`, and what follows."""
    if not release.after:
        text = "its quota has room now: the engine lets it in at its next pass"
    else:
        ends = _clock(release.at, now)
        names = ", ".join(f"#{h.key}" for h in release.after)
        if len(release.after) == 1:
            text = f"held by quota until task {names} (walltime ends {ends}) ends"
        else:
            text = f"held by quota until tasks {names} (walltimes end {ends}) end"
    if start is None:
        return f"{text}; then no estimate: the pool {pool} waits on work without a walltime"
    if start > release.at + 1:
        return f"{text}, then for room in pool {pool} ({_clock(start, now)})"
    return text


def _when(start: float | None) -> datetime | None:
    return datetime.fromtimestamp(start, tz=UTC) if start is not None else None


def _clock(at: float, now: datetime) -> str:
    moment = datetime.fromtimestamp(at, tz=UTC)
    same_day = moment.date() == now.astimezone(UTC).date()
    return moment.strftime("%H:%M UTC" if same_day else "%Y-%m-%d %H:%M UTC")
