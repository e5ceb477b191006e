"""Dispatch: submit a pending task's next attempt to its backend, exactly once.

Safe to run any number of times, concurrently or after a crash: a lease lets one dispatcher
in; the attempt's key makes the backend find a job it already made instead of making a
second one (the crash-after-submit case). The sweep finds the tasks whose dispatch message
was lost (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from portal.models import ClusterAccount
from scheduling import hooks, host, sealed, tokens
from scheduling.backends import (
    BackendError,
    BackendUnavailable,
    Job,
    JobState,
    SubmitRequest,
)
from scheduling.decisions.devices import NO_DEVICES
from scheduling.decisions.quota import Hold, Reject
from scheduling.decisions.sandboxes import concurrency
from scheduling.decisions.storage import JobStorage
from scheduling.engine import admission
from scheduling.engine.capacity import lease_extra
from scheduling.engine.follow import QUEUED_REASON, SCHEDULER_UNREACHABLE, apply_jobs
from scheduling.engine.registry import get_backend
from scheduling.engine.starts import watch_starts
from scheduling.engine.storage import StorageError, prepare_job
from scheduling.models import ACTIVE_STATES, Attempt, Task, TaskState, attempt_key
from scheduling.models import Queue as QueueRow
from scheduling.selectors import site_view
from scheduling.selectors.runtimes import runtime_predictions_for
from scheduling.spec import TaskSpec
from scheduling.states import Move, task_set_state, tasks_set_state

log = logging.getLogger(__name__)
S = TaskState

# What dispatch and the state changes after it read; everything else stays in the database.
_DISPATCH_FIELDS = (
    "id",
    "state",
    "reason",
    "spec",
    "type",
    "backend",
    "backend_id",
    "attempts",
    "retry_count",
    "fail_action",
    "key_salt",
    "dispatch_claims",
    "started_at",
    "exit_code",
    "workflow_id",
    "name",
    "queue__name",
    "project__slug",
    "owner__username",
    "owner__cluster_account__unix_username",
    "gpus",
    "cpus",
    "admitted",
    "priority_value",
    # what applying a job that started or ended at once reads (apply_jobs)
    "cancel_requested_at",
    "preemptions",
    "submitted_at",  # the dispatch latency (config/metrics/instruments.py)
)


class DispatchRetry(Exception):
    """The backend was unreachable; the dispatch should be tried again later."""


def _free(now) -> Q:
    """Pending tasks no dispatcher holds and no backoff keeps back."""
    return (
        Q(state=S.PENDING)
        & (Q(dispatch_lease_until__isnull=True) | Q(dispatch_lease_until__lt=now))
        & (Q(not_before__isnull=True) | Q(not_before__lte=now))
    )


def claim_many(task_ids: list[int]) -> list[int]:
    """Take the dispatch lease on every free pending task of `task_ids` in one UPDATE; the
    ids this dispatcher now holds, in the order given. Only one dispatcher holds a lease at
    a time.

    The lease's end is this claim's own (a random microsecond offset makes it unique), so
    the rows just taken are found by it with one SELECT, whatever another dispatcher on
    another host claims at the same moment; the UPDATE re-checks that each lease is free.
    One task needs no SELECT: the UPDATE's count says whether it was taken.
    """
    if not task_ids:
        return []
    now = timezone.now()
    until = now + timedelta(
        seconds=settings.SWITCHYARD_DISPATCH_LEASE_SECONDS,
        microseconds=secrets.randbelow(1_000_000),
    )
    taken = Task.objects.filter(_free(now), pk__in=task_ids).update(
        dispatch_lease_until=until, dispatch_claims=F("dispatch_claims") + 1
    )
    if len(task_ids) == 1:
        return list(task_ids) if taken else []
    held = set(
        Task.objects.filter(pk__in=task_ids, dispatch_lease_until=until).values_list(
            "pk", flat=True
        )
    )
    return [pk for pk in task_ids if pk in held]


def _release(task_id: int, *, reason: str | None = None) -> None:
    values: dict = {"dispatch_lease_until": None}
    if reason is not None:
        values["reason"] = reason
    Task.objects.filter(pk=task_id, state=S.PENDING).update(**values)


def task_dispatch(task_id: int) -> str:
    """Submit a pending task's next attempt to its backend, exactly once: `claim_many` and
    `dispatch_claimed_many` of one. Its outcome, or "not-claimed" (another dispatcher holds
    it, or it is no longer pending); DispatchRetry when its backend was unreachable."""
    if not claim_many([task_id]):
        return "not-claimed"
    outcome = dispatch_claimed_many([task_id])[task_id]
    if outcome == "unreachable":
        raise DispatchRetry(f"task {task_id}: its backend was unreachable")
    return outcome


def dispatch_along(task_id: int, *, at_most: int) -> dict[int, str]:
    """Dispatch a task together with the other pending tasks free now, oldest first, up to
    `at_most` in all: under load their own messages wait behind this one, and one backend
    pass for all of them (the local backend's single scheduling pass) costs about what one
    task's does; their messages then find nothing to claim. Tasks whose backend was last
    found unreachable are left to their own backed-off retries.

    Returns the outcome of each task claimed (as `dispatch_claimed_many`).
    """
    now = timezone.now()
    others = (
        Task.objects.filter(_free(now))
        .exclude(pk=task_id)
        .exclude(reason__startswith=SCHEDULER_UNREACHABLE)
        .order_by("pk")
        .values_list("pk", flat=True)[: at_most - 1]
    )
    return dispatch_claimed_many(claim_many([task_id, *others]))


@dataclasses.dataclass(slots=True)
class _Ready:
    """A claimed task admitted for dispatch, and the request for its next attempt."""

    task: Task
    number: int
    key: str
    request: SubmitRequest
    runtime_key: str = ""  # the work it is a run of (docs/predictions.md)


def dispatch_claimed_many(task_ids: list[int]) -> dict[int, str]:
    """Submit the next attempt of each task whose dispatch lease this dispatcher holds: one
    `submit_many` per backend (the local backend places them all in one scheduling pass).

    Returns each task's outcome, in the order given: "submitted"; "capped" (left pending:
    its queue runs its max_concurrency); "held" or "refused" by admission; "refused" by the backend; "lost-race" (moved meanwhile: its job is taken
    back); or "unreachable" (its backend was: released, to be tried again later).
    """
    tasks = _claimed_tasks(task_ids)
    outcomes: dict[int, str] = _over_concurrency([tasks[pk] for pk in task_ids])
    by_backend: dict[str, list[_Ready]] = {}
    for pk in task_ids:
        if pk in outcomes:
            continue
        ready = _prepare(tasks[pk])
        if isinstance(ready, str):
            outcomes[pk] = ready
        else:
            by_backend.setdefault(ready.task.backend, []).append(ready)
    for alias, group in by_backend.items():
        outcomes.update(_submit(get_backend(alias), group))
    return {pk: outcomes[pk] for pk in task_ids}


def _submit(backend, group: list[_Ready]) -> dict[int, str]:
    """One backend's share of a dispatch: each task's outcome by id."""
    # Each request carries its predicted runtime, for the backend's plans; the task records
    # it with its work's key once queued (docs/predictions.md).
    keys, predicted = runtime_predictions_for([r.request for r in group])
    for r, key, runtime_s in zip(group, keys, predicted, strict=True):
        r.runtime_key = key
        r.request = dataclasses.replace(r.request, planned_runtime_s=runtime_s)
    results: list[tuple[_Ready, Job | BackendError]] = []  # found by an earlier claimant
    fresh: list[_Ready] = []
    for r in group:
        job: Job | BackendError | None
        try:
            # A job under this key can exist only if an earlier dispatcher claimed this
            # attempt and got as far as submitting; the first claimant skips the look-up.
            job = _found(backend, r)
        except BackendError as exc:
            job = exc
        if job is None and r.request.spec.session_idle_s is not None and backend.sessions:
            try:
                # A live sandbox takes a warm one when there is one (docs/sandboxes.md).
                job = backend.claim_warm(r.request)
            except BackendError as exc:
                job = exc
        if job is None:
            fresh.append(r)
        else:
            results.append((r, job))
    if fresh:
        results += zip(fresh, backend.submit_many([r.request for r in fresh]), strict=True)
    outcomes: dict[int, str] = {}
    taken: list[tuple[_Ready, Job]] = []
    for r, result in results:
        if isinstance(result, BackendError):
            outcomes[r.task.pk] = _not_submitted(r, result)
        else:
            taken.append((r, result))
    queued = {}
    for (r, job), outcome in zip(taken, _submitted_many(backend, taken), strict=True):
        outcomes[r.task.pk] = outcome
        if outcome == "submitted" and job.state is JobState.PENDING:
            queued[job.backend_id] = r.task.pk
    watch_starts(backend, queued)
    return outcomes


def _claimed_tasks(task_ids: list[int]) -> dict[int, Task]:
    """The claimed tasks by id, in one narrow query: building the full rows of task, queue,
    pool, project and user was the costliest part of a dispatch after the submit itself."""
    return (
        Task.objects.select_related("queue", "project", "owner__cluster_account")
        .only(*_DISPATCH_FIELDS)
        .in_bulk(task_ids)
    )


def _prepare(task: Task) -> _Ready | str:
    """The claimed task with its admission decided: ready to submit, or what became of it."""
    project, queue_name, user = task.project.slug, task.queue.name, task.owner.get_username()
    decision = admission.admit_for_dispatch(task, project=project, queue=queue_name, user=user)
    if isinstance(decision, Hold):
        admission.hold(task, decision)
        return "held"
    if isinstance(decision, Reject):
        task_set_state(
            task=task,
            to=S.FAILED,
            reason=f"refused: {decision.reason}",
            fields={"dispatch_lease_until": None},
        )
        return "refused"
    number = task.attempts + 1
    key = attempt_key(task.pk, number, task.key_salt)
    site = site_view()
    queue = site.queues.get(task.queue.name)
    if queue is None:  # deleted meanwhile; the fresh view will know
        site = site_view(fresh=True)
        queue = site.queues[task.queue.name]
    try:
        # The only place secret values are opened: for the backend that runs the job.
        spec = TaskSpec.from_dict(task.spec)
        if spec.secret_env:
            spec = dataclasses.replace(spec, secret_env=sealed.open_sealed(task.spec["secret_env"]))
        # Its storage folders, made here (root): docs/storage.md. A live sandbox has none:
        # its own tmpfs home only, as a warm one it may take over (docs/sandboxes.md).
        storage = (
            JobStorage()
            if spec.session_idle_s is not None
            else prepare_job(task, pool=queue.pool, areas=site.storage)
        )
        if spec.sandboxes:
            spec = _with_sandbox_token(spec, task, queue.max_walltime_s)
    except (sealed.CannotOpen, StorageError) as exc:
        task_set_state(
            task=task, to=S.FAILED, reason=str(exc), fields={"dispatch_lease_until": None}
        )
        return "refused"
    request = SubmitRequest(
        key=key,
        spec=spec,
        type=task.type,
        queue=queue,
        project=project,
        user=user,
        extra={
            **_run_as(task.owner),
            **lease_extra(queue_name, request_walltime(task)),
            "portal": site.instance,
        },
        priority=task.priority_value,
        devices=site.devices.get(queue.pool, NO_DEVICES),
        storage=storage,
    )
    return _Ready(task, number, key, request)


def _with_sandbox_token(spec: TaskSpec, task: Task, longest: int | None) -> TaskSpec:
    """A batch task that asked for live sandboxes (`sandboxes: true`) gets the sandbox API's
    address and a token for its own project's sandboxes only, valid while it is queued or
    running and at most its walltime (and 10 minutes for its start) from now. The token is
    a secret value: in the spec handed to the backend, never stored (docs/sandboxes.md)."""
    lifetime = (spec.walltime_s or longest or 24 * 3600) + 600
    token = tokens.mint(task.pk, task.project.slug, lifetime_s=lifetime)
    return dataclasses.replace(
        spec,
        env=tuple(
            sorted({**spec.env_dict, "SWITCHYARD_URL": settings.SWITCHYARD_SANDBOX_API_URL}.items())
        ),
        secret_env=tuple(sorted({**dict(spec.secret_env), "SWITCHYARD_TOKEN": token}.items())),
    )


def _over_concurrency(tasks: list[Task]) -> dict[int, str]:
    """The queues' max_concurrency before a backend sees the tasks: the local backend's own
    scheduling pass holds what is over it, a cluster's scheduler (Slurm) does not, so a
    task for another backend stays pending ("capped"; the pending sweep tries it again) while
    the queue's dispatched and running tasks are at the cap. A live sandbox whose queue
    refuses over the cap fails with the reason, on any backend (docs/sandboxes.md).

    Strict under concurrent dispatchers: each queue's row is locked while its tasks are
    counted, and the tasks let through are marked `admitted` at once (as admission marks
    them), so the next dispatcher counts them before their jobs exist. A few queries per
    queue, not per task. Returns the outcome of each task held back."""
    site = site_view()
    gated: dict[int, list[Task]] = {}
    for task in tasks:
        queue = site.queues.get(task.queue.name)
        if queue is None or queue.max_concurrency is None:
            continue
        if host.is_local(task.backend) and not _refuses(task, queue.over_concurrency):
            continue
        gated.setdefault(task.queue_id, []).append(task)
    outcomes: dict[int, str] = {}
    for queue_id, group in gated.items():
        queue = site.queues[group[0].queue.name]
        cap = queue.max_concurrency or 0
        with transaction.atomic():
            list(QueueRow.objects.select_for_update().filter(pk=queue_id).values_list("pk"))
            taken = queue_slots_taken(queue_id, but=[t.pk for t in group])
            through, over = group[: max(0, cap - taken)], group[max(0, cap - taken) :]
            Task.objects.filter(pk__in=[t.pk for t in through], state=S.PENDING).update(
                admitted=True
            )
        for task in through:
            task.admitted = True
        for at, task in enumerate(over):
            verdict = concurrency(
                taken + len(through) + at, cap, queue.over_concurrency, queue.name
            )
            if _refuses(task, queue.over_concurrency):
                task_set_state(
                    task=task,
                    to=S.FAILED,
                    reason=f"refused: {verdict.reason}",
                    fields={"dispatch_lease_until": None},
                )
                outcomes[task.pk] = "refused"
            else:
                _release(task.pk, reason=f"waiting: {verdict.reason}")
                outcomes[task.pk] = "capped"
    return outcomes


def _refuses(task: Task, over: str) -> bool:
    """A live sandbox in a queue that refuses over its cap (batch tasks always wait)."""
    session = isinstance(task.spec, dict) and task.spec.get("session_idle_s") is not None
    return session and over == "refuse"


def queue_slots_taken(queue_id: int, *, but: list[int] | None = None) -> int:
    """What counts against a queue's max_concurrency: its dispatched and running tasks, and
    the pending ones a dispatcher has let through whose job is being made — its admitted
    tasks that have not ended (a task is admitted from then until it ends or goes back to
    pending or waiting), read through the queue's quota index."""
    rows = Task.objects.filter(
        queue_id=queue_id, admitted=True, state__in=[S.PENDING, *ACTIVE_STATES]
    )
    return (rows.exclude(pk__in=but) if but else rows).count()


def _found(backend, ready: _Ready) -> Job | None:
    return backend.find(ready.key) if ready.task.dispatch_claims > 1 else None


def _not_submitted(ready: _Ready, exc: BackendError) -> str:
    """Unreachable: released, to be tried again later. Refused: the task fails."""
    if isinstance(exc, BackendUnavailable):
        _release(ready.task.pk, reason=f"{SCHEDULER_UNREACHABLE}: {exc}")
        return "unreachable"
    _release(ready.task.pk)
    task_set_state(task=ready.task, to=S.FAILED, reason=f"the backend refused the job: {exc}")
    return "refused"


def _submitted_many(backend, items: list[tuple[_Ready, Job]]) -> list[str]:
    """Record the jobs a backend took: each task queued with its attempt, in one
    transaction for all. Per item "submitted", or "lost-race" for a task moved meanwhile
    (cancelled while we were submitting: its job is taken back)."""
    if not items:
        return []
    moves = [
        Move(
            task=r.task,
            to=S.QUEUED,
            reason=job.reason or QUEUED_REASON,
            message=f"attempt {r.number} submitted to {r.task.backend} as {job.backend_id}",
            fields={
                "attempts": r.number,
                "backend_id": job.backend_id,
                "dispatch_lease_until": None,
                "dispatch_claims": 0,
                "admitted": True,  # it holds its quotas until it ends
                "runtime_key": r.runtime_key,
                "predicted_runtime_s": r.request.planned_runtime_s,
            },
        )
        for r, job in items
    ]
    with transaction.atomic():
        moved = tasks_set_state(moves)
        Attempt.objects.bulk_create(
            Attempt(
                task=r.task,
                number=r.number,
                key=r.key,
                backend_id=job.backend_id,
                state=S.QUEUED,
                log_path=backend.log_path(job.backend_id),
            )
            for (r, job), ok in zip(items, moved, strict=True)
            if ok
        )
    outcomes = []
    for (r, job), ok in zip(items, moved, strict=True):
        if not ok:
            r.task.refresh_from_db()
            if r.task.is_terminal:
                _cancel_quietly(backend, job.backend_id)
        outcomes.append("submitted" if ok else "lost-race")
    with hooks.gathered():  # jobs that ended already: the end hooks once for all
        apply_jobs(
            [
                (r.task, job)
                for (r, job), ok in zip(items, moved, strict=True)
                if ok and job.state is not JobState.PENDING
            ]
        )
    return outcomes


def _run_as(user) -> dict[str, str]:
    """The researcher's own cluster account, when they have one (selected with the task)."""
    try:
        return {"run_as": user.cluster_account.unix_username}
    except ClusterAccount.DoesNotExist:
        return {}


def request_walltime(task: Task) -> int | None:
    return (task.spec.get("walltime_s") if isinstance(task.spec, dict) else None) or None


def _cancel_quietly(backend, backend_id: str) -> None:
    try:
        backend.cancel(backend_id)
    except BackendError:
        log.warning("could not cancel orphan job %s", backend_id, exc_info=True)


def sweep_pending() -> list[int]:
    """Task ids left pending past the grace period with no live lease: dispatch them again.

    This is what makes a stored task impossible to lose: the dispatch message can vanish
    (worker killed, broker down, process died between commit and publish) and the sweep still
    finds the row.
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.SWITCHYARD_PENDING_GRACE_SECONDS)
    return list(
        Task.objects.filter(_free(now), updated_at__lt=stale).values_list("pk", flat=True)[:1000]
    )
