"""The engine: dispatch tasks to backends, follow their jobs, and recover what was dropped.

Celery tasks (scheduling/tasks.py) call these; they hold all the I/O with backends. Every
state change goes through `services.task_set_state`.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from scheduling.backends import (
    BackendError,
    BackendUnavailable,
    Job,
    JobState,
    SubmitRequest,
    get_backend,
)
from scheduling.models import ACTIVE_STATES, Attempt, Task, TaskState, attempt_key
from scheduling.selectors import site_view
from scheduling.services import task_set_state
from scheduling.spec import TaskSpec

log = logging.getLogger(__name__)
S = TaskState

SCHEDULER_UNREACHABLE = "scheduler unreachable"
QUEUED_REASON = "queued in the backend"

# What a finished backend job means for the attempt.
_JOB_TO_TASK = {
    JobState.PENDING: S.QUEUED,
    JobState.RUNNING: S.RUNNING,
    JobState.SUCCEEDED: S.SUCCEEDED,
    JobState.FAILED: S.FAILED,
    JobState.CANCELLED: S.CANCELLED,
    JobState.TIMEOUT: S.TIMEOUT,
    JobState.NODE_FAIL: S.FAILED,
    JobState.UNKNOWN: S.FAILED,
}
# Attempts that end like this are retried while attempts are left; a cancel is never retried.
_RETRIABLE = frozenset({JobState.FAILED, JobState.TIMEOUT, JobState.NODE_FAIL, JobState.UNKNOWN})


# What dispatch and the state changes after it read; everything else stays in the database.
_DISPATCH_FIELDS = (
    "id", "state", "reason", "spec", "type", "backend", "backend_id", "attempts", "retry_count",
    "fail_action", "key_salt", "dispatch_claims", "started_at", "exit_code", "workflow_id",
    "name", "queue__name", "project__slug", "owner__username",
    "owner__cluster_account__unix_username",
)  # fmt: skip


class DispatchRetry(Exception):
    """The backend was unreachable; the dispatch should be tried again later."""


def _claim(task_id: int) -> bool:
    """Take the dispatch lease on a pending task; only one dispatcher holds it at a time."""
    now = timezone.now()
    until = now + timedelta(seconds=settings.SWITCHYARD_DISPATCH_LEASE_SECONDS)
    return bool(
        Task.objects.filter(pk=task_id, state=S.PENDING)
        .filter(Q(dispatch_lease_until__isnull=True) | Q(dispatch_lease_until__lt=now))
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .update(dispatch_lease_until=until, dispatch_claims=F("dispatch_claims") + 1)
    )


def _release(task_id: int, *, reason: str | None = None) -> None:
    values: dict = {"dispatch_lease_until": None}
    if reason is not None:
        values["reason"] = reason
    Task.objects.filter(pk=task_id, state=S.PENDING).update(**values)


def task_dispatch(task_id: int) -> str:
    """Submit a pending task's next attempt to its backend, exactly once.

    Safe to run any number of times, concurrently or after a crash: the lease lets one
    dispatcher in; the attempt's key makes the backend find a job it already made instead of
    making a second one (the crash-after-submit case).
    """
    if not _claim(task_id):
        return "not-claimed"
    # One narrow query: building the full rows of task, queue, pool, project and user was
    # the costliest part of a dispatch after the submit itself.
    task = (
        Task.objects.select_related("queue", "project", "owner__cluster_account")
        .only(*_DISPATCH_FIELDS)
        .get(pk=task_id)
    )
    number = task.attempts + 1
    key = attempt_key(task.pk, number, task.key_salt)
    backend = get_backend(task.backend)
    site = site_view()
    queue = site.queues.get(task.queue.name)
    if queue is None:  # deleted meanwhile; the fresh view will know
        queue = site_view(fresh=True).queues[task.queue.name]
    request = SubmitRequest(
        key=key,
        spec=TaskSpec.from_dict(task.spec),
        type=task.type,
        queue=queue,
        project=task.project.slug,
        user=task.owner.get_username(),
        extra=_run_as(task.owner),
    )
    try:
        # A job under this key can exist only if an earlier dispatcher claimed this attempt
        # and got as far as submitting; the first claimant skips the look-up.
        job = (backend.find(key) if task.dispatch_claims > 1 else None) or backend.submit(request)
    except BackendUnavailable as exc:
        _release(task_id, reason=f"{SCHEDULER_UNREACHABLE}: {exc}")
        raise DispatchRetry(str(exc)) from exc
    except BackendError as exc:
        _release(task_id)
        task_set_state(task=task, to=S.FAILED, reason=f"the backend refused the job: {exc}")
        return "refused"

    with transaction.atomic():
        moved = task_set_state(
            task=task,
            to=S.QUEUED,
            reason=job.reason or QUEUED_REASON,
            message=f"attempt {number} submitted to {task.backend} as {job.backend_id}",
            fields={
                "attempts": number,
                "backend_id": job.backend_id,
                "dispatch_lease_until": None,
                "dispatch_claims": 0,
            },
        )
        if moved:
            Attempt.objects.create(
                task=task, number=number, key=key, backend_id=job.backend_id, state=S.QUEUED
            )
    if not moved:
        # Cancelled (or otherwise moved) while we were submitting: take the job back.
        task.refresh_from_db()
        if task.is_terminal:
            _cancel_quietly(backend, job.backend_id)
        return "lost-race"
    if job.state is not JobState.PENDING:
        apply_job(task, job)
    return "submitted"


def _run_as(user) -> dict[str, str]:
    """The researcher's own cluster account, when they have one (selected with the task)."""
    from portal.models import ClusterAccount

    try:
        return {"run_as": user.cluster_account.unix_username}
    except ClusterAccount.DoesNotExist:
        return {}


def _cancel_quietly(backend, backend_id: str) -> None:
    try:
        backend.cancel(backend_id)
    except BackendError:
        log.warning("could not cancel orphan job %s", backend_id, exc_info=True)


def backend_poll(alias: str) -> int:
    """Follow every active job of one backend with one batched poll call. Returns changes."""
    tasks = list(Task.objects.filter(backend=alias, state__in=ACTIVE_STATES).exclude(backend_id=""))
    if not tasks:
        return 0
    backend = get_backend(alias)
    try:
        jobs = backend.poll([t.backend_id for t in tasks])
    except BackendUnavailable as exc:
        reason = f"{SCHEDULER_UNREACHABLE}: {exc}"
        Task.objects.filter(pk__in=[t.pk for t in tasks]).exclude(reason=reason).update(
            reason=reason
        )
        return 0
    changed = 0
    for task in tasks:
        job = jobs.get(task.backend_id)
        if job is not None and apply_job(task, job):
            changed += 1
    return changed


def apply_job(task: Task, job: Job) -> bool:
    """Bring a task in line with what its backend job is doing. Returns True if it changed."""
    target = _JOB_TO_TASK[job.state]
    now = timezone.now()
    if target == task.state:
        # The backend's word replaces ours, so a reason such as "scheduler unreachable" goes
        # away at the first poll that reaches the backend again.
        reason = job.reason or (QUEUED_REASON if target == S.QUEUED else "")
        if reason != task.reason:
            Task.objects.filter(pk=task.pk, state=task.state).update(reason=reason)
            task.reason = reason
            return True
        return False
    if target == S.QUEUED:
        return False  # a running job never goes back to pending here
    if target == S.RUNNING:
        started = job.started_at or now
        moved = task_set_state(
            task=task,
            to=S.RUNNING,
            reason="",
            message=f"running on {', '.join(job.nodes) or 'its node'}",
            fields={"started_at": task.started_at or started},
        )
        if moved:
            Attempt.objects.filter(task=task, number=task.attempts).update(
                state=S.RUNNING, started_at=started, nodes=list(job.nodes)
            )
        return moved
    return _finish_attempt(task, job, target, now)


def _finish_attempt(task: Task, job: Job, target: str, now) -> bool:
    ended = job.ended_at or now
    reason = job.reason or _default_reason(job)
    Attempt.objects.filter(task=task, number=task.attempts).update(
        state=target,
        reason=reason,
        exit_code=job.exit_code,
        ended_at=ended,
        nodes=list(job.nodes),
    )
    attempts_left = task.retry_count + 1 - task.attempts
    if job.state in _RETRIABLE and attempts_left > 0:
        backoff = retry_backoff_seconds(task.attempts)
        moved = task_set_state(
            task=task,
            to=S.PENDING,
            reason=f"attempt {task.attempts} {target}: {reason}; retrying in {backoff:g}s",
            message=f"attempt {task.attempts} ended {target} ({reason}); "
            f"{attempts_left} attempt(s) left",
            fields={
                "backend_id": "",
                "exit_code": job.exit_code,
                "not_before": now + timedelta(seconds=backoff),
            },
        )
        if moved:
            from scheduling.services import _enqueue_dispatch

            _enqueue_dispatch(task.pk, countdown=backoff)
        return moved
    if target in (S.FAILED, S.TIMEOUT) and task.fail_action == "skip":
        reason = f"{target}: {reason}; skipped (fail_action: skip)"
        target = S.SKIPPED
    return task_set_state(
        task=task,
        to=target,
        reason=reason,
        fields={
            "exit_code": job.exit_code,
            "ended_at": ended,
            "started_at": task.started_at or job.started_at,
        },
    )


def retry_backoff_seconds(attempt: int) -> float:
    """1 s, 2 s, 4 s … after attempts 1, 2, 3 …, capped; short, so Celery countdowns stay
    far below the broker's visibility timeout."""
    base = settings.SWITCHYARD_RETRY_BACKOFF_SECONDS
    return min(base * 2 ** (attempt - 1), settings.SWITCHYARD_RETRY_BACKOFF_MAX_SECONDS)


def _default_reason(job: Job) -> str:
    if job.state is JobState.SUCCEEDED:
        return "exit code 0"
    if job.state is JobState.UNKNOWN:
        return "the backend no longer knows the job"
    if job.exit_code is not None:
        return f"exit code {job.exit_code}"
    return job.state.value


def sweep_pending() -> list[int]:
    """Task ids left pending past the grace period with no live lease: dispatch them again.

    This is what makes a stored task impossible to lose: the dispatch message can vanish
    (worker killed, broker down, process died between commit and publish) and the sweep still
    finds the row.
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.SWITCHYARD_PENDING_GRACE_SECONDS)
    return list(
        Task.objects.filter(state=S.PENDING, updated_at__lt=stale)
        .filter(Q(dispatch_lease_until__isnull=True) | Q(dispatch_lease_until__lt=now))
        .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
        .values_list("pk", flat=True)[:1000]
    )


def active_backends() -> list[str]:
    return list(
        Task.objects.filter(state__in=ACTIVE_STATES).values_list("backend", flat=True).distinct()
    )
