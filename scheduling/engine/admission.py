"""Admission: a task holds its quotas from the moment it is admitted until it ends.

At dispatch, before anything reaches a backend, the task's quota rows are locked
(`SELECT … FOR UPDATE`: on PostgreSQL concurrent admissions of one scope queue up; SQLite's
writer lock serialises them anyway), the scope's use is read, and the pure `admit` decides:
admit (the task is marked `admitted` in the same transaction, so the next admission counts
it), hold (the task waits, `hold = quota`, with the quota and its numbers as its reason), or
reject. A project's allocation (accounting's, read through `scheduling.hooks`) is asked
first: outside its dates, or with its budget spent, the task is held the same way, with the
allocation's reason (docs/accounting.md). Held tasks are reconsidered, in the queue's order, whenever an admitted task of
their queue ends and by the periodic policy pass (so a raised limit takes effect without a
resubmission). docs/policy.md.

Where a project's quota may borrow, the other projects' quotas of the queue (its cohort) are
locked too and their use read, and a task admitted on borrowed room says so (`borrowed`).
A lender locks its own rows only, which a borrower locks as well: the two never race.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from scheduling import hooks, outbox
from scheduling.decisions.order import on_room
from scheduling.decisions.quota import Admit, Ask, Hold, Reject, Usage, admit
from scheduling.models import Hold as HoldKind
from scheduling.models import Quota, Task, TaskState
from scheduling.selectors import site_view
from scheduling.selectors.fairshare import share_factors_for
from scheduling.selectors.policy import ordered, site_minute
from scheduling.selectors.quota import queue_usage, with_budgets
from scheduling.states import task_set_state

S = TaskState


def ask_of(task: Task, project: str, queue: str, user: str) -> Ask:
    return Ask(project=project, queue=queue, user=user, gpus=task.gpus, cpus=task.cpus)


def admit_for_dispatch(task: Task, *, project: str, queue: str, user: str) -> Admit | Hold | Reject:
    """Decide a claimed pending task's admission; on admit it holds its quotas from now."""
    site = site_view()
    if project in site.allocated:
        waits = hooks.allocation_hold(project, task.gpus, task.cpus, timezone.now())
        if waits is not None:
            return Hold(waits)
    rules = site.quota_rules(project, queue)
    if not rules:
        # Marked admitted with its move to queued: nothing counts it sooner. An attempt
        # before this one may have borrowed (the rules changed since): its own band again.
        value = on_room(task.priority_value, borrowed=False)
        if value != task.priority_value:
            Task.objects.filter(pk=task.pk).update(priority_value=value)
            task.priority_value = value
        return Admit()
    cohort = site.quota_cohort(project, queue)
    ask = ask_of(task, project, queue, user)
    with transaction.atomic():
        # The lock is what makes admission race-free: whoever holds it sees every earlier
        # admission committed.
        locked = [r.id for r in (*rules, *cohort) if r.id is not None]
        list(Quota.objects.select_for_update().filter(pk__in=locked).order_by("pk"))
        scopes = queue_usage(task.queue_id, project_id=None if cohort else task.project_id)
        if task.admitted:  # let through a queue's concurrency cap: not its own rival
            for scope in ((project, queue, None), (project, queue, user)):
                held = scopes.get(scope, Usage())
                scopes[scope] = Usage(held.gpus - ask.gpus, held.cpus - ask.cpus, held.tasks - 1)
        usage = with_budgets(scopes, rules)
        decision = admit(ask, rules, usage, cohort=cohort)
        if isinstance(decision, Admit):
            # On borrowed room it starts after its level's work on its own quota (order.py).
            value = on_room(task.priority_value, borrowed=bool(decision.what))
            Task.objects.filter(pk=task.pk, state=S.PENDING).update(
                admitted=True, borrowed=decision.what, priority_value=value
            )
            task.admitted, task.borrowed, task.priority_value = True, decision.what, value
    return decision


def hold(task: Task, decision: Hold) -> bool:
    """The task waits for its quota (not for a dependency: no wait timeout runs)."""
    return task_set_state(
        task=task,
        to=S.WAITING,
        reason=decision.reason,
        message=f"held: {decision.reason}",
        fields={
            "hold": HoldKind.QUOTA,
            "dispatch_lease_until": None,
            "admitted": False,
            "borrowed": "",
        },
    )


def release_held(queue_ids: list[int] | None = None, *, now=None) -> int:
    """Reconsider quota-held tasks, in each queue's order; release those that fit now.

    Returns how many were released (to pending, dispatched at once). Their reasons are
    refreshed with the current numbers; a task a lowered limit now refuses outright ends.
    """
    now = now or timezone.now()
    waiting = Task.objects.filter(state=S.WAITING, hold=HoldKind.QUOTA)
    if queue_ids is not None:
        waiting = waiting.filter(queue_id__in=queue_ids)
    held = list(waiting.select_related("project", "queue", "owner"))
    if not held:
        return 0
    site = site_view()
    minute = site_minute(now)
    released = 0
    allocations: dict[tuple[str, bool, bool], str | None] = {}
    for queue_id in sorted({t.queue_id for t in held}):
        tasks = [t for t in held if t.queue_id == queue_id]
        queue = tasks[0].queue.name
        rules = {r for t in tasks for r in site.quota_rules(t.project.slug, queue)}
        usage: dict = with_budgets(queue_usage(queue_id), rules, now)
        shares = share_factors_for(site, queue, now)
        for task in ordered(site, tasks, queue=queue, shares=shares, minute=minute, now=now):
            project, user = task.project.slug, task.owner.get_username()
            ask = ask_of(task, project, queue, user)
            cohort = site.quota_cohort(project, queue)
            waits = (
                _allocation_waits(allocations, project, task, now)
                if project in site.allocated
                else None
            )
            decision = (
                Hold(waits)
                if waits is not None
                else admit(ask, site.quota_rules(project, queue), usage, cohort=cohort)
            )
            if isinstance(decision, Admit):
                if task_set_state(
                    task=task,
                    to=S.PENDING,
                    reason="waiting for the dispatcher",
                    message=f"released: {_room(decision)}",
                    # Ready from now: the wait its quota held it is not a wait for room.
                    fields={"hold": "", "ready_at": now},
                ):
                    outbox.dispatch(task.pk)
                    released += 1
                    for scope in ((project, queue, None), (project, queue, user)):
                        usage[scope] = usage.get(scope, Usage()).plus(ask)
            elif isinstance(decision, Reject):
                task_set_state(task=task, to=S.FAILED, reason=f"refused: {decision.reason}")
            elif decision.reason != task.reason:
                Task.objects.filter(pk=task.pk, state=S.WAITING).update(
                    reason=decision.reason, updated_at=timezone.now()
                )
    return released


def _allocation_waits(
    known: dict[tuple[str, bool, bool], str | None], project: str, task: Task, now
) -> str | None:
    """The allocation's reason for the task, asked once per project and kind of task in a
    pass (what a task uses, GPUs or CPUs, decides which budget counts it)."""
    key = (project, task.gpus > 0, task.cpus > 0)
    if key not in known:
        known[key] = hooks.allocation_hold(project, task.gpus, task.cpus, now)
    return known[key]


def _room(decision: Admit) -> str:
    if decision.borrowed:
        return f"the cohort lends it {decision.what} of unused quota"
    return "its quota has room"


def after_ends(tasks: list[Task]) -> None:
    """The task-end hook: what admitted tasks held is free, so their queues' held tasks may
    start (each queue reconsidered once, however many of its tasks ended)."""
    queue_ids = sorted({task.queue_id for task in tasks if task.admitted})
    if queue_ids:
        release_held(queue_ids)
