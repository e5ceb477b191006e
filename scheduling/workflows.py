"""Workflows: submit a DAG, release dependants, apply fail actions, wait timeouts, triggers.

A task with dependencies (or a trigger) waits in state `waiting`, holding nothing in any
backend. When a task ends, `after_end` settles its dependants at once: a dependant whose
dependencies all succeeded (or were skipped) is released to `pending` and dispatched; one
whose dependency ended badly with `fail_action: abort` is cancelled, and so on down the DAG.
Every move is a compare-and-set through `task_set_state`, so two workers settling the same
dependant release it once.
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from portal.errors import ApplicationError, ErrorItem
from scheduling.decisions import format_duration
from scheduling.models import (
    TERMINAL_STATES,
    Task,
    TaskState,
    Workflow,
    WorkflowState,
)

S = TaskState
W = WorkflowState
_BAD_ENDS = frozenset({S.FAILED, S.TIMEOUT, S.CANCELLED})


# --- submit -------------------------------------------------------------------------------


def workflow_submit(
    *, user: AbstractBaseUser, text: str | bytes, fmt: str | None = None
) -> Workflow:
    """Validate a whole DAG, decide every task, and store it all or nothing."""
    from scheduling.descriptor import DescriptorError, load_descriptor, topological_order
    from scheduling.services import _sniff, project_for_member, task_create, task_decide
    from scheduling.spec import WorkflowSpec

    try:
        spec = load_descriptor(text, fmt=fmt, max_bytes=settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES)
    except DescriptorError as exc:
        raise ApplicationError(
            "invalid descriptor", errors=[ErrorItem(e.field, e.message, e.got) for e in exc.errors]
        ) from None
    if not isinstance(spec, WorkflowSpec):
        raise ApplicationError(
            "this endpoint takes kind: Workflow; send single tasks to /api/v1/tasks/",
            field="kind",
            got="Task",
        )
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    project = project_for_member(user, spec.project)

    from scheduling.selectors import tasks_visible_by_ids

    errors: list[ErrorItem] = []
    decided = {}
    upstream_ids: dict[str, list[Task]] = {}
    for i, task_spec in enumerate(spec.tasks):
        try:
            decided[task_spec.name] = task_decide(task_spec, field_prefix=f"tasks[{i}]")
            upstream_ids[task_spec.name] = tasks_visible_by_ids(
                user, task_spec.depends_on_ids, field=f"tasks[{i}].depends_on"
            )
        except ApplicationError as exc:
            errors.extend(exc.errors)
    if errors:
        raise ApplicationError("invalid workflow", errors=errors)

    by_name = {t.name: t for t in spec.tasks}
    with transaction.atomic():
        workflow = Workflow.objects.create(
            project=project,
            owner=user,
            name=spec.name,
            descriptor=text,
            descriptor_format=fmt or _sniff(text),
        )
        created: dict[str, Task] = {}
        for name in topological_order(spec):
            task_spec = by_name[name]
            upstream = [created[n] for n in task_spec.depends_on] + upstream_ids[name]
            created[name] = task_create(
                user=user,
                project=project,
                decided=decided[name],
                descriptor=json.dumps(task_spec.as_dict(), indent=2),
                fmt="json",
                workflow=workflow,
                upstream=upstream,
            )
    return workflow


def workflow_cancel(*, user: AbstractBaseUser, workflow: Workflow) -> Workflow:
    """Cancel every unfinished task of the workflow; the workflow ends `cancelled`."""
    from scheduling.services import task_cancel

    if workflow.state != W.RUNNING:
        if workflow.state == W.CANCELLED:
            return workflow
        raise ApplicationError(
            f"the workflow has already ended ({workflow.state})", field="state", status=409
        )
    Workflow.objects.filter(pk=workflow.pk, state=W.RUNNING).update(
        state=W.CANCELLED, reason=f"cancelled by {user.get_username()}"
    )
    # Downstream first, so no task is released by an upstream one ending meanwhile.
    for task in workflow.tasks.exclude(state__in=TERMINAL_STATES).order_by("-id"):
        try:
            task_cancel(user=user, task=task)
        except ApplicationError as exc:
            if exc.status != 409:  # 409: it ended meanwhile, which is fine
                raise
    workflow_refresh(workflow.pk)
    workflow.refresh_from_db()
    return workflow


# --- settling -------------------------------------------------------------------------------


def dependency_verdict(dep: Task) -> bool | None:
    """True: the dependant may run; False: it never will; None: not decided yet."""
    if dep.state in (S.SUCCEEDED, S.SKIPPED):
        return True
    if dep.state in _BAD_ENDS:
        # A cancelled or timed-out-waiting task with fail_action skip lets its dependants run
        # as if it had succeeded.
        return dep.fail_action == "skip"
    return None


def after_end(task: Task) -> None:
    """A task has just reached a terminal state: settle its dependants and its workflow."""
    if task.workflow_id and task.state in _BAD_ENDS and task.fail_action == "abort":
        Workflow.objects.filter(pk=task.workflow_id, state=W.RUNNING).update(
            state=W.FAILED, reason=f"task {task.name} ended {task.state}: {task.reason}"
        )
    settle_waiting(task.dependants.filter(state=S.WAITING).values_list("pk", flat=True))
    if task.workflow_id:
        workflow_refresh(task.workflow_id)


def settle_waiting(task_ids: Iterable[int]) -> None:
    """Release, cancel or keep waiting each task, and follow cancellations down the DAG.

    Iterative, so a long chain never hits the recursion limit.
    """
    from scheduling.services import _enqueue_dispatch, task_set_state

    queue = deque(task_ids)
    workflows: set[int] = set()
    while queue:
        task = Task.objects.filter(pk=queue.popleft(), state=S.WAITING).first()
        if task is None:
            continue
        deps = list(task.depends_on.only("id", "name", "state", "fail_action"))
        verdicts = [(dep, dependency_verdict(dep)) for dep in deps]
        blocked = [dep for dep, verdict in verdicts if verdict is False]
        if blocked:
            dep = blocked[0]
            if task_set_state(
                task=task,
                to=S.CANCELLED,
                reason=f"not run: it depends on {dep.name} (#{dep.pk}), which ended {dep.state}",
                settle=False,
            ):
                queue.extend(task.dependants.filter(state=S.WAITING).values_list("pk", flat=True))
                if task.workflow_id:
                    workflows.add(task.workflow_id)
            continue
        unfinished = [dep for dep, verdict in verdicts if verdict is None]
        if unfinished:
            names = ", ".join(dep.name for dep in unfinished[:5])
            more = f" and {len(unfinished) - 5} more" if len(unfinished) > 5 else ""
            _set_reason(task, f"waiting for {names}{more}")
            continue
        if task.trigger_file and not trigger_ready(task.trigger_file):
            _set_reason(task, f"waiting for the trigger file {task.trigger_file}")
            continue
        what = "dependencies done" if deps else "no dependencies"
        if task.trigger_file:
            what += f"; trigger file {task.trigger_file} exists"
        if task_set_state(
            task=task,
            to=S.PENDING,
            reason="waiting for the dispatcher",
            message=f"released: {what}",
            fields={"waiting_since": None},
            settle=False,
        ):
            _enqueue_dispatch(task.pk)
    for workflow_id in workflows:
        workflow_refresh(workflow_id)


def _set_reason(task: Task, reason: str) -> None:
    if task.reason != reason:
        Task.objects.filter(pk=task.pk, state=S.WAITING).update(reason=reason)


def workflow_refresh(workflow_id: int) -> None:
    """End the workflow once every task has ended; its state says how it went."""
    states = list(Task.objects.filter(workflow_id=workflow_id).values_list("state", flat=True))
    if not states or any(state not in TERMINAL_STATES for state in states):
        return
    ok = all(state in (S.SUCCEEDED, S.SKIPPED) for state in states)
    now = timezone.now()
    Workflow.objects.filter(pk=workflow_id, state=W.RUNNING).update(
        state=W.SUCCEEDED if ok else W.FAILED,
        reason="every task succeeded or was skipped" if ok else "some tasks did not succeed",
    )
    Workflow.objects.filter(pk=workflow_id, ended_at__isnull=True).update(ended_at=now)


# --- timers -------------------------------------------------------------------------------


def expire_waiting(now=None) -> int:
    """End tasks that waited longer than their wait_timeout; their fail_action applies."""
    from scheduling.services import task_set_state

    now = now or timezone.now()
    ended = 0
    candidates = Task.objects.filter(
        state=S.WAITING, wait_timeout_s__isnull=False, waiting_since__isnull=False
    )
    for task in candidates:
        if task.waiting_since + timedelta(seconds=task.wait_timeout_s) > now:
            continue
        limit = format_duration(task.wait_timeout_s)
        to = S.SKIPPED if task.fail_action == "skip" else S.CANCELLED
        if task_set_state(
            task=task, to=to, reason=f"waited longer than its wait_timeout ({limit}); {task.reason}"
        ):
            ended += 1
    return ended


def check_triggers() -> int:
    """Settle the waiting tasks that have a trigger file; returns how many were looked at."""
    ids = list(
        Task.objects.filter(state=S.WAITING).exclude(trigger_file="").values_list("pk", flat=True)
    )
    settle_waiting(ids)
    return len(ids)


def trigger_roots() -> list[str]:
    return [os.path.realpath(root) for root in settings.SWITCHYARD_TRIGGER_ROOTS]


def trigger_path_allowed(path: str) -> bool:
    """Only paths under a configured root: a user must not probe the filesystem with them."""
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in trigger_roots())


def trigger_ready(path: str) -> bool:
    # Resolved again at every check: a symlink planted later must not lead outside the roots.
    return trigger_path_allowed(path) and os.path.exists(os.path.realpath(path))


def workflow_summary(workflow: Workflow) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for state in workflow.tasks.values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts
