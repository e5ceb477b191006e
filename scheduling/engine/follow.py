"""Following jobs: one batched poll per backend, and what a job's state means for its task.

When an attempt ends, the lifecycle rules (`scheduling/decisions/lifecycle.py`) say whether
the task is retried after a backoff or ends, and how; the attempt-end and task-end hooks
run from the state service.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.utils import timezone

from config.bulk import update_rows
from scheduling import hooks, outbox
from scheduling.backends import BackendError, BackendUnavailable, Job, JobState
from scheduling.decisions import lifecycle
from scheduling.engine.admission import release_held
from scheduling.engine.registry import get_backend
from scheduling.models import ACTIVE_STATES, Attempt, Task, TaskState
from scheduling.states import AttemptEnd, Move, attempts_end, task_set_state, tasks_set_state

log = logging.getLogger(__name__)
S = TaskState

SCHEDULER_UNREACHABLE = "scheduler unreachable"
QUEUED_REASON = "queued in the backend"

# What a backend job's state means for the attempt.
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


def backend_poll(alias: str) -> int:
    """Follow every active job of one backend with one batched poll call. Returns changes.

    The active tasks are read as a few columns each; only those whose job says something
    new are loaded whole (10,000 running jobs, nothing changed: no model is built).
    """
    active = list(
        Task.objects.filter(backend=alias, state__in=ACTIVE_STATES)
        .exclude(backend_id="")
        .values_list("pk", "backend_id", "state", "reason", "cancel_requested_at")
    )
    if not active:
        return 0
    backend = get_backend(alias)
    try:
        jobs = backend.poll([backend_id for _, backend_id, *_ in active])
    except BackendUnavailable as exc:
        reason = f"{SCHEDULER_UNREACHABLE}: {exc}"
        Task.objects.filter(pk__in=[pk for pk, *_ in active]).exclude(reason=reason).update(
            reason=reason,
            updated_at=timezone.now(),  # the workflow page sends what changed
        )
        return 0
    news = {}
    for pk, backend_id, state, reason, cancel_requested_at in active:
        job = jobs.get(backend_id)
        if job is not None and not _same(job, state, reason, cancel_requested_at):
            news[pk] = job
    changed = 0
    ids = sorted(news)
    with hooks.gathered():  # the end hooks once for all the jobs that ended
        for at in range(0, len(ids), 1000):  # within every database's limit of parameters
            tasks = Task.objects.filter(pk__in=ids[at : at + 1000]).order_by("pk")
            changed += apply_jobs(
                [(t, news[t.pk]) for t in tasks if t.backend_id == news[t.pk].backend_id]
            )
    return changed


def follow_now(tasks: list[Task]) -> dict[int, JobState] | None:
    """What the backends say of these tasks' jobs now, applied at once as a poll applies it;
    None when a backend does not answer.

    The portal learns of a start or an end a poll late. Whoever would stop work on that
    picture asks first (scheduling/engine/capacity.py): else it would preempt for a task its
    backend has just started, stop a second task for room a job's end has just freed, or
    run a finished task again. One poll of these few jobs per backend.
    """
    by_alias: dict[str, list[Task]] = {}
    for task in tasks:
        if task.backend_id:
            by_alias.setdefault(task.backend, []).append(task)
    jobs: dict[int, Job] = {}
    for alias, group in by_alias.items():
        try:
            found = get_backend(alias).poll([t.backend_id for t in group])
        except (BackendError, ImproperlyConfigured) as exc:
            log.warning("backend %s did not answer: %s", alias, exc)
            return None
        jobs.update({t.pk: found[t.backend_id] for t in group if t.backend_id in found})
    # Applied to the tasks as they are now (a cancel may have been asked meanwhile).
    fresh = Task.objects.filter(pk__in=list(jobs)).order_by("pk")
    with hooks.gathered():
        apply_jobs([(t, jobs[t.pk]) for t in fresh if t.backend_id == jobs[t.pk].backend_id])
    return {pk: job.state for pk, job in jobs.items()}


def _same(job: Job, state: str, reason: str, cancel_requested_at) -> bool:
    """Whether the job says nothing new about a task in this state with this reason: the
    poll's test before it loads a task, and `apply_jobs`'s first."""
    target = _JOB_TO_TASK[job.state]
    if target == S.QUEUED and state == S.RUNNING:
        return True  # a running job never goes back to pending here
    if target != state:
        return False
    if cancel_requested_at is not None:
        return True  # "cancelling" stays until the cancel is carried out
    return _job_reason(job, target) == reason


def _job_reason(job: Job, target: str) -> str:
    return job.reason or (QUEUED_REASON if target == S.QUEUED else "")


def apply_job(task: Task, job: Job) -> bool:
    """Bring a task in line with what its backend job is doing (`apply_jobs` of one).
    Returns True if it changed."""
    return apply_jobs([(task, job)]) == 1


def apply_jobs(pairs: list[tuple[Task, Job]]) -> int:
    """Bring tasks in line with what their backend jobs are doing: a new reason is written
    task by task; the tasks whose job started move to running together (one transaction,
    their attempts in one update), those whose job ended likewise (a task that is retried
    goes back one by one). Returns how many changed."""
    starting, ending, changed = [], [], 0
    for task, job in pairs:
        if _same(job, task.state, task.reason, task.cancel_requested_at):
            continue
        _record_pull(task, job)
        target = _JOB_TO_TASK[job.state]
        if target == task.state:
            # The backend's word replaces ours, so a reason such as "scheduler unreachable"
            # goes away at the first poll that reaches the backend again.
            reason = _job_reason(job, target)
            Task.objects.filter(pk=task.pk, state=task.state).update(
                reason=reason, updated_at=timezone.now()
            )
            task.reason = reason
            changed += 1
        elif target == S.RUNNING:
            starting.append((task, job))
        else:
            ending.append((task, job))
    if starting:
        changed += _start_running(starting)
    if ending:
        changed += _finish_attempts(ending)
    return changed


def _record_pull(task: Task, job: Job) -> None:
    """Keep on the attempt what its image's pull took, once the job says it is done
    (docs/containers.md): written once, by the first poll that sees it (a job reports its
    pull from then on, so a missed poll is made up by the next news, its end at the latest)."""
    pull = job.pull
    if pull is None or not pull.finished:
        return
    Attempt.objects.filter(task=task, number=task.attempts, pull_seconds__isnull=True).update(
        pull_seconds=round(pull.seconds, 3), pull_bytes=pull.done_bytes
    )


def _running_move(task: Task, job: Job, now) -> Move:
    return Move(
        task=task,
        to=S.RUNNING,
        reason=task.reason if task.cancel_requested_at else job.reason,
        # e.g. "placed across 2 switches: …" when the placement could not keep to one
        message=f"running on {', '.join(job.nodes) or 'its node'}"
        + (f"; {job.reason}" if job.reason else ""),
        fields={"started_at": task.started_at or job.started_at or now},
    )


def _start_running(pairs: list[tuple[Task, Job]]) -> int:
    now = timezone.now()
    with transaction.atomic():
        moved = tasks_set_state([_running_move(task, job, now) for task, job in pairs])
        started = [(task, job) for (task, job), ok in zip(pairs, moved, strict=True) if ok]
        if len(started) == 1:  # its attempt by one UPDATE
            [(task, job)] = started
            Attempt.objects.filter(task=task, number=task.attempts).update(
                state=S.RUNNING, started_at=job.started_at or now, nodes=list(job.nodes)
            )
        elif started:
            by_task = {task.pk: (task.attempts, job) for task, job in started}
            attempts = list(
                Attempt.objects.filter(task_id__in=by_task).only("pk", "task_id", "number")
            )
            current = [a for a in attempts if a.number == by_task[a.task_id][0]]
            update_rows(
                Attempt,
                [
                    (
                        a.pk,
                        {
                            "state": S.RUNNING,
                            "started_at": by_task[a.task_id][1].started_at or now,
                            "nodes": list(by_task[a.task_id][1].nodes),
                        },
                    )
                    for a in current
                ],
            )
    return len(started)


def _outcome(task: Task, job: Job, target: str, reason: str) -> lifecycle.Retry | lifecycle.End:
    return lifecycle.attempt_outcome(
        ended=target,
        retriable=job.state in _RETRIABLE and task.cancel_requested_at is None,
        reason=reason,
        # Attempts ended by preemption, a lease's end or a start-up resubmit are not failures.
        attempt=task.attempts - task.preemptions,
        retry_count=task.retry_count,
        fail_action=task.fail_action,
        backoff_base_s=settings.SWITCHYARD_RETRY_BACKOFF_SECONDS,
        backoff_cap_s=settings.SWITCHYARD_RETRY_BACKOFF_MAX_SECONDS,
    )


def _retry(task: Task, job: Job, outcome: lifecycle.Retry, now) -> bool:
    moved = task_set_state(
        task=task,
        to=S.PENDING,
        reason=outcome.reason,
        message=outcome.message,
        fields={
            "backend_id": "",
            "exit_code": job.exit_code,
            "not_before": now + timedelta(seconds=outcome.backoff_s),
            # The next attempt is admitted again: what this one held is free meanwhile.
            "admitted": False,
            "borrowed": "",
            "ready_at": now + timedelta(seconds=outcome.backoff_s),  # its wait starts again
        },
    )
    if moved:
        outbox.dispatch(task.pk, countdown=outcome.backoff_s)
        release_held([task.queue_id])
    return moved


def _end_move(task: Task, job: Job, outcome: lifecycle.End, ended) -> Move:
    return Move(
        task=task,
        to=outcome.state,
        reason=outcome.reason,
        fields={
            "exit_code": job.exit_code,
            "ended_at": ended,
            "started_at": task.started_at or job.started_at,
        },
    )


def _finish_attempts(pairs: list[tuple[Task, Job]]) -> int:
    """The attempts of these ended jobs ended in one transaction, then the tasks that end
    moved together; a task that is retried goes back one by one."""
    now = timezone.now()
    targets = [_JOB_TO_TASK[job.state] for _, job in pairs]
    reasons = [job.reason or _default_reason(job) for _, job in pairs]
    attempts_end(
        [
            AttemptEnd(
                task,
                task.attempts,
                target,
                reason,
                job.exit_code,
                job.ended_at or now,
                list(job.nodes),
            )
            for (task, job), target, reason in zip(pairs, targets, reasons, strict=True)
        ]
    )
    moves, changed = [], 0
    for (task, job), target, reason in zip(pairs, targets, reasons, strict=True):
        outcome = _outcome(task, job, target, reason)
        if isinstance(outcome, lifecycle.Retry):
            changed += _retry(task, job, outcome, now)
        else:
            moves.append(_end_move(task, job, outcome, job.ended_at or now))
    return changed + (sum(tasks_set_state(moves)) if moves else 0)


def retry_backoff_seconds(attempt: int) -> float:
    """The delay before the attempt after `attempt`, with the configured base and cap."""
    return lifecycle.retry_backoff_seconds(
        attempt,
        base_s=settings.SWITCHYARD_RETRY_BACKOFF_SECONDS,
        cap_s=settings.SWITCHYARD_RETRY_BACKOFF_MAX_SECONDS,
    )


def _default_reason(job: Job) -> str:
    if job.state is JobState.SUCCEEDED:
        return "exit code 0"
    if job.state is JobState.UNKNOWN:
        return "the backend no longer knows the job"
    if job.exit_code is not None:
        return f"exit code {job.exit_code}"
    return job.state.value


def active_backends() -> list[str]:
    """Each backend with active jobs, once (order_by(): the default ordering would make
    DISTINCT per task, and poll each backend once per task)."""
    active = Task.objects.filter(state__in=ACTIVE_STATES).order_by()
    return list(active.values_list("backend", flat=True).distinct())
