"""Celery tasks: ids in, call the engine. Retries live here.

Services and the engine publish these by name (`scheduling/outbox.py`).
"""

from __future__ import annotations

import dataclasses
import time

from celery import shared_task
from django.conf import settings
from django.db.models import Q

from config import logcontext
from config.locks import exclusive
from scheduling import engine, hooks, notifications, outbox
from scheduling.engine import (
    capacity,
    cluster,
    health,
    images,
    levels,
    samples,
    sandboxes,
    settle,
    storage,
)
from scheduling.models import TERMINAL_STATES, Task


@shared_task(
    name=outbox.DISPATCH,
    bind=True,
    acks_late=True,
    max_retries=None,
    autoretry_for=(engine.DispatchRetry,),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
)
def dispatch(self, task_id: int) -> int:
    """The task, and with it the backlog of other free pending tasks (docs/deployment.md,
    "Dispatch"). Its own unreachable backend retries this message with backoff; another
    task's gets a message of its own."""
    with logcontext.bound(task_id=task_id):
        return _submitted(engine.dispatch_along(task_id, at_most=CLAIM_AT_ONCE), own=task_id)


CLAIM_AT_ONCE = 50


@shared_task(name=outbox.DISPATCH_MANY, acks_late=True)
def dispatch_many(task_ids: list[int]) -> int:
    """A batch's tasks, claimed in one UPDATE, then submitted in order; a redelivery finds
    them claimed or dispatched and does nothing (docs/deployment.md, "Scale out")."""
    done = 0
    for at in range(0, len(task_ids), CLAIM_AT_ONCE):  # each lease well within its time
        claimed = engine.claim_many(task_ids[at : at + CLAIM_AT_ONCE])
        done += _submitted(engine.dispatch_claimed_many(claimed))
    return done


def _submitted(outcomes: dict[int, str], *, own: int | None = None) -> int:
    """How many of a dispatch's tasks were submitted. Those whose backend was unreachable
    back off each alone: another task gets a dispatch message of its own; `own`, the task
    of the message being run, has that message retried."""
    for task_id, outcome in outcomes.items():
        if outcome == "unreachable" and task_id != own:
            dispatch.apply_async((task_id,), countdown=2)
    if own is not None and outcomes.get(own) == "unreachable":
        raise engine.DispatchRetry(f"task {own}: its backend was unreachable")
    return sum(outcome == "submitted" for outcome in outcomes.values())


@shared_task(name=outbox.CANCEL, bind=True, acks_late=True, max_retries=None)
def cancel(self, task_ids: list[int]) -> int:
    """Carry out cancel requests; the tasks whose backend was unreachable back off together."""
    try:
        return engine.cancel_requested(task_ids)
    except engine.CancelRetry as exc:
        countdown = min(60, 2 ** min(self.request.retries, 5))
        raise self.retry(args=(exc.task_ids,), countdown=countdown, exc=exc) from exc


_last_poll_end = [float("-inf")]  # this process's, by time.monotonic()


@shared_task(name="scheduling.poll_backends", acks_late=True)
def poll_backends() -> int | None:
    """One poll of every backend with active jobs. Under load several poll messages may wait
    in the queue (they expire only after SWITCHYARD_POLL_EXPIRES_SECONDS, so that a busy
    worker still polls at all); one arriving within half a poll interval of this process's
    last poll is skipped (None)."""
    if time.monotonic() - _last_poll_end[0] < settings.SWITCHYARD_POLL_SECONDS / 2:
        return None
    try:
        return sum(engine.backend_poll(alias) for alias in engine.active_backends())
    finally:
        _last_poll_end[0] = time.monotonic()


@shared_task(name="scheduling.sweep_pending", acks_late=True)
def sweep_pending() -> int:
    """Lost messages: pending tasks are dispatched again, cancel requests carried out again."""
    ids = engine.sweep_pending()
    for at in range(0, len(ids), outbox.MANY_CHUNK):
        dispatch_many.delay(ids[at : at + outbox.MANY_CHUNK])
    cancels = engine.sweep_cancels()
    if cancels:
        cancel.delay(cancels)
    return len(ids) + len(cancels)


@shared_task(name="scheduling.timers", acks_late=True)
def timers() -> int:
    """Wait timeouts and trigger files, the engine's only clock-driven releases, the
    dependants a lost end message left waiting, and idle live sandboxes ended."""
    return (
        settle.expire_waiting()
        + settle.check_triggers()
        + settle.settle_stranded()
        + sandboxes.reclaim()  # live sandboxes idle past their timeout (docs/sandboxes.md)
    )


@shared_task(name="scheduling.warm_pools", acks_late=True)
def warm_pools() -> dict[str, int]:
    """The backends' live-sandbox warm pools, as the queues configure them."""
    return sandboxes.warm_pass()


@shared_task(name=outbox.SETTLE, acks_late=True)
def settle_waiting(task_ids: list[int]) -> int:
    """Waiting tasks just stored: released, cancelled or left waiting, as their dependencies
    and trigger files say (a redelivery finds them settled and changes nothing)."""
    settle.settle_waiting(task_ids)
    return len(task_ids)


@shared_task(name=outbox.TASKS_ENDED, acks_late=True)
def tasks_ended(task_ids: list[int]) -> int:
    """Tasks a service ended (a user's cancel): every task-end hook runs for them here, not
    in the request. A redelivery changes nothing: settling and releasing look at the tasks
    as they are now, and the mail of a task's end goes out once."""
    ended = list(Task.objects.filter(pk__in=task_ids, state__in=TERMINAL_STATES).order_by("pk"))
    hooks.tasks_ended(ended)
    return len(ended)


@shared_task(name=outbox.RELEVEL, acks_late=True)
def relevel(task_ids: list[int]) -> int:
    """These tasks' levels and numbers now, e.g. after a priority request was approved."""
    return levels.relevel(tasks=Q(pk__in=task_ids))


@shared_task(name="scheduling.housekeeping", acks_late=True)
def housekeeping() -> int:
    """Ended jobs' folders past their retention are removed (their logs are kept)."""
    return engine.housekeep()


@shared_task(name="scheduling.policy_pass", acks_late=True)
def policy_pass() -> dict:
    """Levels move, approvals expire, quota-held tasks are reconsidered (docs/policy.md)."""
    return dataclasses.asdict(levels.policy_pass())


@shared_task(name=outbox.CAPACITY, acks_late=True)
def capacity_pass() -> dict:
    """Preemption, leases opened and reclaimed, start-up timeouts (docs/capacity.md)."""
    with exclusive("capacity-pass") as held:
        return capacity.capacity_pass() if held else {"skipped": "another pass runs"}


@shared_task(name="scheduling.prepull_pass", acks_late=True)
def prepull_pass() -> dict:
    """Each pool's warm images pulled onto its nodes; the nodes' image caches recorded."""
    with exclusive("prepull-pass") as held:
        return images.prepull_pass() if held else {"skipped": "another pass runs"}


@shared_task(name=outbox.LEASE_PREPULL, acks_late=True)
def lease_prepull(lease_id: int) -> str:
    """A lease's borrower's warm images onto its nodes; then the lease takes effect."""
    return images.lease_prepull(lease_id)


@shared_task(name="scheduling.health_pass", acks_late=True)
def health_pass() -> dict:
    """Node checks: drain the sick, fail and retry the work of the lost."""
    with exclusive("health-pass") as held:
        return health.health_pass() if held else {"skipped": "another pass runs"}


@shared_task(name=outbox.NODES, acks_late=True)
def nodes_apply(node_ids: list[int]) -> int:
    return health.nodes_apply(node_ids)


@shared_task(name="scheduling.load_sample", acks_late=True)
def load_sample() -> int:
    """Every queue's load now, for the dashboards' charts over time."""
    return samples.take_sample()


@shared_task(name="scheduling.slurm_sync_accounts")
def slurm_sync_accounts(alias: str) -> list[tuple[str, list[str | None]]]:
    """Every project a Slurm account with its members associated (an operator's command runs
    it in its own process: `manage.py slurm_sync_accounts`)."""
    return cluster.sync_accounts(alias)


@shared_task(name=outbox.STORAGE, acks_late=True)
def storage_prepare(user_id: int) -> int:
    """The user's folders in every storage area (docs/storage.md)."""
    return storage.prepare_user(user_id)


@shared_task(name=outbox.STORAGE_LEAVE, acks_late=True)
def storage_leave(project: str, user_id: int) -> bool:
    """A member left the project: their job account leaves its group (docs/storage.md)."""
    return storage.member_left(project, user_id)


@shared_task(name="scheduling.storage_housekeeping", acks_late=True)
def storage_housekeeping() -> dict[str, int]:
    """Tasks' working folders past their area's retention are removed; each project's group
    holds its current members' job accounts and no other (docs/storage.md)."""
    return {
        "folders_removed": storage.expire_task_folders(),
        "groups_left": storage.reconcile_groups(),
    }


@shared_task(name=outbox.NOTIFY_END, acks_late=True)
def notify_task_end(task_id: int) -> bool:
    return notifications.send_task_end(task_id)
