"""Capacity that moves: preemption, leases of nodes between pools, start-up timeouts.

Run by beat every `SWITCHYARD_CAPACITY_MS` (and at once after a lease is opened). The same
for every backend: the engine decides from what the portal knows runs where
(`selectors/occupancy.py`) with the pure functions (`decisions/preempt.py`, `place()` with a
lease's end), and acts through the Backend protocol: cancel a victim's job, lend and take
back nodes (Slurm: partitions). docs/capacity.md.

A requeue never counts against a task's retries: the task moves back to pending first (so a
poll cannot take the cancelled job for a user's cancel), then its job is cancelled, then it
is dispatched again.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import cast

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from scheduling import outbox
from scheduling.backends import BackendError, JobState
from scheduling.backends.base import LeaseView
from scheduling.decisions.humanize import format_duration
from scheduling.decisions.levels import LEVELS
from scheduling.decisions.place import free_view, place
from scheduling.decisions.preempt import Running, whom_to_preempt
from scheduling.engine.admission import release_held
from scheduling.engine.follow import follow_now
from scheduling.engine.images import prepull_timeouts
from scheduling.engine.registry import get_backend
from scheduling.models import (
    Alert,
    AttemptState,
    LeaseSchedule,
    Node,
    NodeLease,
    PoolBorrowing,
    Queue,
    Task,
    TaskEvent,
    TaskState,
)
from scheduling.selectors import site_view, site_view_invalidate
from scheduling.selectors.occupancy import running_on
from scheduling.selectors.policy import ordered, site_minute
from scheduling.services.alerts import raise_alert
from scheduling.services.capacity import LeaseError, open_lease
from scheduling.spec import TaskSpec
from scheduling.states import attempt_end, task_set_state

log = logging.getLogger(__name__)
S = TaskState


def capacity_pass(now: datetime | None = None) -> dict[str, int]:
    """Every step, in order, each whatever became of the ones before it: a step that fails
    (a bug, a database error) is logged and the pass goes on, then raises its error at the
    end, so that the failure shows where the pass's result is recorded."""
    now = now or timezone.now()
    steps = {
        "leases_reclaimed": reclaim_due_leases,
        "leases_opened": open_scheduled_leases,
        "leases_prepull_timed_out": prepull_timeouts,
        "leases_applied": apply_leases,
        "strays": requeue_strays,
        "preempted": preempt,
        "startup_timeouts": startup_timeouts,
    }
    done: dict[str, int] = {}
    failed: list[Exception] = []
    for name, step in steps.items():
        try:
            done[name] = step(now)
        except Exception as exc:  # noqa: BLE001 - the other steps still run; raised below
            log.exception("capacity pass: %s failed; the other steps go on", name)
            failed.append(exc)
    if failed:
        raise failed[0]
    return done


# -- requeue ------------------------------------------------------------------------------


def requeue(task: Task, *, reason: str, event: str | None = None) -> bool:
    """End the task's current attempt (`preempted`) and queue the task again."""
    backend_id, number, backend = task.backend_id, task.attempts, task.backend
    moved = task_set_state(
        task=task,
        to=S.PENDING,
        reason=f"{reason}; requeued",
        message=event or f"{reason}; requeued (not counted against its retries)",
        fields={
            "backend_id": "",
            "admitted": False,
            "borrowed": "",
            "preemptions": task.preemptions + 1,
            "dispatch_lease_until": None,
            "not_before": None,
            "ready_at": timezone.now(),  # its wait starts again, as the simulator counts it
        },
    )
    if not moved:
        return False
    attempt_end(task=task, number=number, state=AttemptState.PREEMPTED, reason=reason)
    if backend_id:
        try:
            get_backend(backend).cancel(backend_id)
        except BackendError as exc:
            log.warning(
                "could not cancel %s of requeued task %s: %s",
                backend_id,
                task.pk,
                exc,
                extra={"task_id": task.pk, "job_id": backend_id},
            )
    outbox.dispatch(task.pk)
    transaction.on_commit(lambda: release_held([task.queue_id]))
    return True


# -- preemption ---------------------------------------------------------------------------


def _reclaims(site, task: Task) -> str | None:
    """The queue where `task`, admitted within its project's nominal quota, may take back
    room its project lends (borrowed work there yields to it); None if it borrows itself."""
    if task.borrowed:
        return None
    rules = site.quota_rules(task.project.slug, task.queue.name)
    return task.queue.name if any(r.lends for r in rules) else None


def preempt(now: datetime) -> int:
    """Waiting higher-level work takes the room of lower-level preemptible work it needs.

    Only in pools with a preemptible queue; only tasks waiting in their backend for longer
    than `SWITCHYARD_PREEMPT_AFTER_S` (the backend may start them meanwhile on its own); and
    only while the backend says the task still waits and its victims still run.
    """
    site = site_view()
    preemptible_pools = {q.pool for q in site.queues.values() if q.preemptible}
    cutoff = now - timedelta(seconds=settings.SWITCHYARD_PREEMPT_AFTER_S)
    preempted = 0
    for pool in sorted(preemptible_pools):
        nodes = site.pool_nodes.get(pool, ())
        waiting = list(
            Task.objects.filter(state=S.QUEUED, queue__pool__name=pool)
            .annotate(queued_at=Max("attempt_set__submitted_at"))
            .filter(queued_at__lt=cutoff)
            .select_related("project", "queue")
        )
        if not waiting or not nodes:
            continue
        running = [
            Running(
                key=str(o.task.pk),
                task_type=o.task.type,
                level=o.task.level,
                preemptible=site.queues[o.task.queue.name].preemptible,
                allocations=o.allocations,
                started_at=o.started_at,
                borrowed=o.task.queue.name if o.task.borrowed else "",
            )
            for o in running_on({n.name for n in nodes})
            if o.task.queue.name in site.queues
        ]
        by_key = {
            str(t.pk): t
            for t in Task.objects.filter(pk__in=[int(r.key) for r in running]).select_related(
                "queue"
            )
        }
        for task in ordered(
            site, waiting, queue=waiting[0].queue.name, shares={}, minute=site_minute(now), now=now
        ):
            queue = site.queues.get(task.queue.name)
            if queue is None:
                continue
            decision = whom_to_preempt(
                TaskSpec.from_dict(task.spec),
                queue,
                task.level,
                nodes,
                running,
                now=now.timestamp(),
                reclaim=_reclaims(site, task),
            )
            if decision is None:
                continue
            said = follow_now([task, *(by_key[key] for key in decision.victims)])
            if said is None:
                break  # its backend does not answer: nothing is stopped in this pool now
            gone = {key for key in decision.victims if said.get(int(key)) is not JobState.RUNNING}
            if gone or said.get(task.pk) is not JobState.PENDING:
                # A poll behind: a victim that ended (or went back to its queue) holds no room
                # for the waiting tasks after this one; this one is decided at the next pass.
                running = [r for r in running if r.key not in gone]
                continue
            what = f"task #{task.pk} ({task.name}, {LEVELS[task.level]}-level {task.type})"
            done = [
                key
                for key in decision.victims
                if requeue(by_key[key], reason=f"preempted by {what}")
            ]
            if not done:
                continue
            preempted += len(done)
            TaskEvent.objects.create(
                task=task,
                at=now,
                from_state=task.state,
                to_state=task.state,
                message=f"{decision.reason}: #{', #'.join(done)}",
            )
            # It will start in the room just freed: the next waiting task must not count on it.
            running = [r for r in running if r.key not in decision.victims]
            running.append(
                Running(
                    str(task.pk),
                    task.type,
                    task.level,
                    queue.preemptible,
                    decision.placement.allocations,
                    now.timestamp(),
                    task.queue.name if task.borrowed else "",
                )
            )
    return preempted


def _still_running(tasks: list[Task]) -> list[Task]:
    """Of running tasks about to be requeued, all but those whose jobs have ended: one that
    has just ended is recorded as it ended, never run again. A job its backend put back in
    its queue is requeued too (its cancel is what frees a lease's nodes). A backend that
    does not answer cannot tell: all are kept, as before there was this check."""
    state = follow_now(tasks)
    if state is None:
        return tasks
    return [t for t in tasks if (s := state.get(t.pk)) is None or not s.finished]


# -- leases -------------------------------------------------------------------------------


def open_scheduled_leases(now: datetime) -> int:
    """Open today's lease of every enabled schedule whose window has come (once a window)."""
    opened = 0
    minute = site_minute(now)
    for schedule in LeaseSchedule.objects.filter(enabled=True).select_related(
        "pool", "queue__pool"
    ):
        start_min = schedule.start.hour * 60 + schedule.start.minute
        since = (minute - start_min) % (24 * 60)  # minutes since today's (or last night's) start
        if since * 60 >= schedule.duration_s:
            continue
        window_start = (now - timedelta(minutes=since)).replace(second=0, microsecond=0)
        if NodeLease.objects.filter(schedule=schedule, starts_at__gte=window_start).exists():
            continue
        remaining = schedule.duration_s - since * 60 - now.second
        try:
            open_lease(
                pool=schedule.pool,
                queue=schedule.queue,
                count=schedule.count,
                duration_s=max(60, remaining),
                now=now,
                schedule=schedule,
                reason=f"schedule: {schedule}",
            )
        except LeaseError as exc:
            raise_alert(
                Alert.Kind.LEASE, f"scheduled lease not opened: {exc}", f"{schedule}: {exc}"
            )
            continue
        opened += 1
    return opened


def apply_leases(now: datetime) -> int:
    """Tell the backends about every active lease (idempotent: Slurm shrinks its time)."""
    applied = 0
    for lease in (
        NodeLease.objects.filter(NodeLease.in_effect(), ends_at__gt=now)
        .select_related("pool", "queue")
        .prefetch_related("nodes")
    ):
        try:
            get_backend(lease.pool.backend).apply_lease(_lease_view(lease), now=now.timestamp())
            applied += 1
        except BackendError as exc:
            log.warning("could not apply lease %s: %s", lease.pk, exc)
    return applied


def reclaim_due_leases(now: datetime) -> int:
    """Take back the nodes of every lease that has ended.

    In this order, so nothing of the borrower is left there: the backend stops placing the
    borrower's work on the nodes (`end_lease`); the work still running there is requeued
    (its jobs cancelled); the backend lets go of the nodes. A backend that cannot yet (Slurm
    keeps a partition while its jobs are completing) is asked again next pass; the lease
    ends when it has. Work that started on the nodes just before they went back is found by
    `requeue_strays` the moment the portal sees it running.
    """
    reclaimed = 0
    for lease in (
        NodeLease.objects.filter(state=NodeLease.State.ACTIVE, ends_at__lte=now)
        .select_related("pool", "queue__pool")
        .prefetch_related("nodes")
    ):
        view = _lease_view(lease)
        backend = get_backend(lease.pool.backend)
        ended = _end_in_backend(backend, view)
        names = set(view.nodes)
        borrowers = [  # the borrower's work (the lender's is moot)
            o.task for o in running_on(names) if o.task.queue.pool_id != lease.pool_id
        ]
        requeued = sum(
            requeue(task, reason=f"lease #{lease.pk} ended: its nodes were taken back")
            for task in _still_running(borrowers)
        )
        if requeued:
            NodeLease.objects.filter(pk=lease.pk).update(requeued=F("requeued") + requeued)
        if not ended and not _end_in_backend(backend, view):
            continue
        NodeLease.objects.filter(pk=lease.pk, state=NodeLease.State.ACTIVE).update(
            state=NodeLease.State.ENDED, reclaimed_at=now
        )
        reclaimed += 1
    if reclaimed:
        site_view_invalidate()
    return reclaimed


def _end_in_backend(backend, view: LeaseView) -> bool:
    try:
        backend.end_lease(view)
    except BackendError as exc:
        log.info("lease %s not yet ended in its backend (asked again next pass): %s", view.id, exc)
        return False
    return True


def requeue_strays(now: datetime) -> int:
    """Running work on a node that is not its queue's (the node went back to its pool as
    the work started): requeued, so no borrower's work outlives its lease. CPU work on the
    idle cores of a pool its own may borrow from (backfill across pools) is no stray: its
    walltime ends it before that pool's next reservation, even if the pair is switched off
    meanwhile (docs/policy.md)."""
    pools = dict(Node.objects.values_list("name", "pool__name"))
    lent = set(
        NodeLease.objects.filter(NodeLease.in_effect(), ends_at__gt=now).values_list(
            "nodes__name", "queue__pool__name"
        )
    )
    lenders = set(PoolBorrowing.objects.values_list("lender__name", "borrower__name"))
    strays: list[Task] = []
    foreign_to: dict[int, str] = {}  # task → the nodes it holds that are not its pool's
    site = site_view()
    for occupant in running_on(None):
        task = occupant.task
        queue = site.queues.get(task.queue.name)
        if queue is None:
            continue
        foreign = [
            a.node
            for a in occupant.allocations
            if a.node in pools
            and pools[a.node] != queue.pool
            and (a.node, queue.pool) not in lent
            and (a.gpu_indices or (pools[a.node], queue.pool) not in lenders)
        ]
        if foreign:
            strays.append(task)
            foreign_to[task.pk] = ", ".join(foreign)
    return sum(
        requeue(task, reason=f"{foreign_to[task.pk]} went back to its pool; not lent any more")
        for task in _still_running(strays)
    )


def _lease_view(lease: NodeLease):
    return LeaseView(
        id=lease.pk,
        nodes=tuple(sorted(n.name for n in lease.nodes.all())),
        lender_queues=tuple(lease.pool.queues.values_list("name", flat=True)),
        queue=lease.queue.name,
        pool=lease.queue.pool.name,
        ends_at=lease.ends_at.timestamp(),
    )


def lease_partitions(queue: str, walltime_s: int | None, now: datetime) -> list[str]:
    """Leases of `queue` a task of this walltime may use (its walltime ends before theirs).

    Read fresh, not from the cached site view: a lease ended early must not be offered."""
    if not walltime_s:
        return []
    if not any(borrower == queue for _, borrower, _ in site_view().leases):
        return []  # the common case costs no query
    ids = NodeLease.objects.filter(
        NodeLease.in_effect(),
        queue__name=queue,
        ends_at__gte=now + timedelta(seconds=walltime_s),
    ).values_list("pk", flat=True)
    return [f"lease-{pk}" for pk in sorted(ids)]


def lease_extra(queue: str, walltime_s: int | None) -> dict[str, str]:
    """What a submit request carries of the nodes lent to `queue` that a task of this
    walltime may also use (Slurm: their partitions; the local backend reads leases from its
    inventory instead)."""
    names = lease_partitions(queue, walltime_s, timezone.now())
    return {"lease_partitions": ",".join(names)} if names else {}


# -- start-up timeouts ----------------------------------------------------------------------


def startup_timeouts(now: datetime) -> int:
    """Tasks dispatched but not started within their queue's start-up timeout although their
    pool had room for them: an alert, and a resubmit where the queue allows.

    A task that waits because its pool is full is not stuck: it waits its turn (and may
    preempt, above); only one that should have started and did not is timed out."""
    timed_out = 0
    site = site_view()
    for queue in Queue.objects.filter(startup_timeout_s__isnull=False):
        policy = site.queues.get(queue.name)
        timeout_s = cast(int, queue.startup_timeout_s)  # the filter above: only queues with one
        cutoff = now - timedelta(seconds=timeout_s)
        late = list(
            Task.objects.filter(queue=queue, state=S.QUEUED)
            .annotate(queued_at=Max("attempt_set__submitted_at"))
            .filter(queued_at__lt=cutoff)
        )
        if not late or policy is None:
            continue
        nodes = site.pool_nodes.get(policy.pool, ())
        held = [a for o in running_on({n.name for n in nodes}) for a in o.allocations]
        room = [free_view(n, held) for n in nodes]
        limit = format_duration(timeout_s)
        stuck = []
        for task in late:
            if place(TaskSpec.from_dict(task.spec), policy, room, now=now.timestamp()) is None:
                continue  # waiting for room, not stuck
            subject = f"task #{task.pk} attempt {task.attempts} not started"
            alerted = Alert.objects.filter(task=task, kind=Alert.Kind.STARTUP, subject=subject)
            if not alerted.exists():
                stuck.append((task, subject))
        said = follow_now([task for task, _ in stuck]) if stuck else None
        for task, subject in stuck:
            if said is None or said.get(task.pk) is not JobState.PENDING:
                continue  # started meanwhile (now recorded), or its backend cannot say
            why = (
                f"not started within {limit} of its dispatch although its pool had room "
                f"(queue {queue.name}'s start-up timeout)"
            )
            raise_alert(
                Alert.Kind.STARTUP, subject, f"{task.name}: {why}; {task.reason}", task=task
            )
            timed_out += 1
            if queue.startup_resubmit:
                requeue(task, reason=why)
            else:
                Task.objects.filter(pk=task.pk, state=S.QUEUED).update(
                    reason=f"{why}; {task.reason}"
                )
    return timed_out
