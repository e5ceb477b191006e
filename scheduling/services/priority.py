"""Priority-raise requests: a researcher asks, a queue admin (or platform admin) decides.

A request names a task, or a project's tasks in one queue, a level, a reason and an end. It
never raises anything by itself: approval does, until the end (docs/policy.md). Every step
is recorded (the request's own fields, and an event on the task) and the requester is told.

No one approves their own request (a queue admin who asks waits for another admin of the
queue or a platform admin; rejecting their own withdraws it). A task has at most one pending
request (a database constraint), and a person at most SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING:
an inbox is somebody's work, and a sweep that asks once per task would bury it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from portal import audit
from portal.errors import ApplicationError
from portal.models import Project
from portal.notify import notify
from portal.selectors import project_get_for_member
from scheduling import outbox
from scheduling.decisions.levels import HIGH, LEVELS, MEDIUM
from scheduling.models import (
    TERMINAL_STATES,
    UNSTARTED_STATES,
    PriorityRequest,
    Queue,
    Task,
    TaskEvent,
)
from scheduling.selectors.requests import can_decide

R = PriorityRequest.State
MAX_REASON = 2000


def priority_requests_room(user: User, fields: list[str]) -> None:
    """Refuse, naming the first field over the limit, a submission whose `fields` (one per
    request it would open) would take the user past their ceiling of pending requests."""
    if not fields:
        return
    most = settings.SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING
    pending = PriorityRequest.objects.filter(requester_id=user.pk, state=R.PENDING).count()
    if pending + len(fields) <= most:
        return
    over = fields[max(most - pending, 0)]
    raise ApplicationError(
        f"at most {most} pending priority requests per person "
        "(SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING): you have "
        f"{pending} and this asks for {len(fields)} more; wait for decisions, or ask once "
        "for your project's tasks in the queue",
        field=over,
        got=pending + len(fields),
        status=409,
    )


def priority_request_from_descriptor(task: Task, *, user: User, now: datetime) -> None:
    """`priority: high` in a descriptor: a request for the task, pending a decision."""
    until = now + timedelta(hours=settings.SWITCHYARD_PRIORITY_REQUEST_DEFAULT_HOURS)
    request = PriorityRequest.objects.create(
        requester=user,
        project_id=task.project_id,
        queue_id=task.queue_id,
        task=task,
        level=HIGH,
        reason="asked in the task's descriptor (priority: high)",
        until=until,
    )
    _event(task, f"asked for level high (request #{request.pk}): a queue admin decides", now)


def priority_request_create(
    *,
    user: User,
    level: str,
    reason: str,
    until: datetime,
    task: Task | None = None,
    project: str | None = None,
    queue: str | None = None,
) -> PriorityRequest:
    """Ask for `level` for a task (already fetched for the user) or a project's queue."""
    number = _level(level)
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("say why the work needs the higher level", field="reason")
    if len(reason) > MAX_REASON:
        raise ApplicationError(f"at most {MAX_REASON} characters", field="reason", got=len(reason))
    now = timezone.now()
    longest = timedelta(hours=settings.SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS)
    if until <= now:
        raise ApplicationError("must be in the future", field="until", got=until.isoformat())
    if until > now + longest:
        raise ApplicationError(
            f"at most {settings.SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS} hours from now",
            field="until",
            got=until.isoformat(),
        )
    if task is not None:
        if task.is_terminal:
            raise ApplicationError(
                f"the task has already ended ({task.state})", field="task", status=409
            )
        if task.state not in UNSTARTED_STATES:  # the policy pass levels only work that waits
            raise ApplicationError(
                f"the task has already started ({task.state}): a level orders only tasks "
                "that wait to start",
                field="task",
                got=task.state,
                status=409,
            )
        if task.level >= number:
            raise ApplicationError(
                f"the task is already at level {LEVELS[task.level]}", field="level", got=level
            )
        target = {"task": task, "project_id": task.project_id, "queue_id": task.queue_id}
        same = Q(task=task)
    else:
        if not project or not queue:
            raise ApplicationError("name a task, or a project and a queue", field="task")
        the_project: Project = project_get_for_member(user, project)
        the_queue = Queue.objects.filter(name=queue).first()
        if the_queue is None:
            raise ApplicationError("no such queue", field="queue", got=queue)
        target = {"task": None, "project": the_project, "queue": the_queue}
        same = Q(task=None, project=the_project, queue=the_queue)
    earlier = PriorityRequest.objects.filter(same, state=R.PENDING).first()
    if earlier is not None:
        raise ApplicationError(
            f"request #{earlier.pk} for this is still pending", field="task", status=409
        )
    priority_requests_room(user, ["task" if task is not None else "queue"])
    with transaction.atomic():
        try:
            with transaction.atomic():
                request = PriorityRequest.objects.create(
                    requester=user, level=number, reason=reason, until=until, **target
                )
        except IntegrityError:  # another request for the task was stored meanwhile
            raise ApplicationError(
                "a request for this task is already pending", field="task", status=409
            ) from None
        audit.record(
            audit.Action.PRIORITY_REQUEST,
            actor=user,
            target=f"priority request #{request.pk} for {_target(request)}",
            project=request.project.slug,
            queue=request.queue.name,
            detail={"level": level, "until": until.isoformat(), "reason": reason},
        )
        if task is not None:
            _event(
                task, f"{user.get_username()} asked for level {level} (request #{request.pk})", now
            )
    for admin in request.queue.admins.exclude(pk=user.pk):
        notify(
            admin,
            f"priority request #{request.pk} to decide",
            f"{user.get_username()} asks for level {level} for {_target(request)} until "
            f"{until:%Y-%m-%d %H:%M} UTC: {reason}",
        )
    return request


def priority_request_decide(
    *, user: User, request: PriorityRequest, approve: bool, comment: str = ""
) -> PriorityRequest:
    """Approve (the level applies at once, until the request's end) or reject, with a comment."""
    if not can_decide(user, request):
        raise ApplicationError(
            "only this queue's admins or a platform admin decide its requests", status=403
        )
    if approve and request.requester_id == user.pk:
        raise ApplicationError(
            "you asked for this raise: another admin of the queue, or a platform admin, "
            "approves it (you may reject it to withdraw it)",
            field="requester",
            got=user.get_username(),
            status=403,
        )
    now = timezone.now()
    if request.state != R.PENDING:
        raise ApplicationError(
            f"the request is already {request.state}", field="state", got=request.state, status=409
        )
    if approve and request.until <= now:
        raise ApplicationError("the request has expired", field="until", status=409)
    if approve and request.task_id:
        started = Task.objects.filter(pk=request.task_id).exclude(state__in=UNSTARTED_STATES)
        state = started.values_list("state", flat=True).first()
        if state is not None:  # approved, it would show beside a level that never moved
            raise ApplicationError(
                f"task #{request.task_id} has already started ({state}): a level orders "
                "only tasks that wait to start; reject the request or let it expire",
                field="task",
                got=state,
                status=409,
            )
    to = R.APPROVED if approve else R.REJECTED
    comment = (comment or "").strip()[:MAX_REASON]
    with transaction.atomic():
        if not PriorityRequest.objects.filter(pk=request.pk, state=R.PENDING).update(
            state=to, decided_by=user, decided_at=now, comment=comment
        ):
            raise ApplicationError("the request was decided meanwhile", status=409)
        request.refresh_from_db()
        verdict = f"request #{request.pk} {to} by {user.get_username()}"
        if comment:
            verdict += f": {comment}"
        tasks = _tasks(request)
        for task in tasks:
            _event(task, verdict, now)
        audit.record(
            audit.Action.PRIORITY_APPROVE if approve else audit.Action.PRIORITY_REJECT,
            actor=user,
            target=f"priority request #{request.pk} for {_target(request)}",
            project=request.project.slug,
            queue=request.queue.name,
            detail={"level": LEVELS[request.level], "comment": comment},
        )
    if approve:
        # The level applies as soon as a worker has it: in the portal and in the backends.
        outbox.relevel([task.pk for task in tasks])
    notify(
        request.requester,
        f"priority request #{request.pk} {to}",
        f"Your request #{request.pk} for level {LEVELS[request.level]} for {_target(request)} "
        f"was {to} by {user.get_username()}."
        + (f"\n\n{comment}" if comment else "")
        + (f"\n\nIt holds until {request.until:%Y-%m-%d %H:%M} UTC." if approve else ""),
    )
    return request


def _level(name: str) -> int:
    if name not in ("medium", "high"):
        raise ApplicationError("must be medium or high", field="level", got=name)
    return {"medium": MEDIUM, "high": HIGH}[name]


def _scope(request: PriorityRequest) -> Q:
    if request.task_id:
        return Q(pk=request.task_id)
    return Q(project_id=request.project_id, queue_id=request.queue_id)


def _tasks(request: PriorityRequest) -> list[Task]:
    return list(
        Task.objects.filter(_scope(request)).exclude(state__in=TERMINAL_STATES).only("id", "state")
    )


def _target(request: PriorityRequest) -> str:
    if request.task_id:
        return f"task #{request.task_id}"
    return f"project {request.project.slug}'s tasks in queue {request.queue.name}"


def _event(task: Task, message: str, now: datetime) -> None:
    TaskEvent.objects.create(
        task=task, at=now, from_state=task.state, to_state=task.state, message=message
    )
