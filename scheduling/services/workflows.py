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
from dataclasses import dataclass
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
from scheduling.spec import WorkflowSpec

S = TaskState
W = WorkflowState
_BAD_ENDS = frozenset({S.FAILED, S.TIMEOUT, S.CANCELLED})


# --- submit -------------------------------------------------------------------------------


def workflow_submit(
    *, user: AbstractBaseUser, text: str | bytes, fmt: str | None = None
) -> Workflow:
    """Validate a whole DAG, decide every task, and store it all or nothing."""
    spec = _load(text, fmt)
    if not isinstance(spec, WorkflowSpec):
        raise ApplicationError(
            "this endpoint takes kind: Workflow; send single tasks to /api/v1/tasks/",
            field="kind",
            got="Task",
        )
    return workflow_submit_spec(user=user, spec=spec, descriptor=_text(text), fmt=fmt)


def descriptor_submit(
    *, user: AbstractBaseUser, text: str | bytes, fmt: str | None = None
) -> Task | Workflow:
    """Submit a descriptor of either kind: a Task is stored alone, a Workflow as its DAG."""
    from scheduling.services import _sniff, task_submit_spec

    spec = _load(text, fmt)
    text = _text(text)
    if isinstance(spec, WorkflowSpec):
        return workflow_submit_spec(user=user, spec=spec, descriptor=text, fmt=fmt)
    return task_submit_spec(user=user, spec=spec, descriptor=text, fmt=fmt or _sniff(text))


def _load(text: str | bytes, fmt: str | None):
    from scheduling.descriptor import DescriptorError, load_descriptor

    try:
        return load_descriptor(text, fmt=fmt, max_bytes=settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES)
    except DescriptorError as exc:
        raise ApplicationError(
            "invalid descriptor", errors=[ErrorItem(e.field, e.message, e.got) for e in exc.errors]
        ) from None


def _text(text: str | bytes) -> str:
    return text.decode("utf-8") if isinstance(text, bytes) else text


def workflow_submit_spec(
    *, user: AbstractBaseUser, spec: WorkflowSpec, descriptor: str, fmt: str | None
) -> Workflow:
    """Decide every task of a parsed workflow against the site; store all of it or nothing.

    Every task's errors are reported at once, each field prefixed with `tasks[i].`.
    """
    from scheduling.descriptor import topological_order
    from scheduling.selectors import tasks_visible_by_ids
    from scheduling.services import _sniff, project_for_member, task_create, task_decide

    project = project_for_member(user, spec.project)
    errors: list[ErrorItem] = []
    decided = {}
    upstream_ids: dict[str, list[Task]] = {}
    for i, task_spec in enumerate(spec.tasks):
        # Both checks run for every task, so one round trip shows every problem.
        try:
            decided[task_spec.name] = task_decide(task_spec, field_prefix=f"tasks[{i}]")
        except ApplicationError as exc:
            errors.extend(exc.errors)
        try:
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
            descriptor=descriptor,
            descriptor_format=fmt or _sniff(descriptor),
        )
        created: dict[str, Task] = {}
        # Upstream tasks first, so every task's dependencies exist when it is stored; ids
        # then follow the DAG, which workflow_cancel relies on.
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
    """Cancel every unfinished task of the workflow, running ones included.

    A running workflow ends `cancelled`; one that has already failed (an abort) keeps that
    state, but its tasks still running on other branches are cancelled too. Cancelling again
    is a no-op, or finishes a cancel that a backend error interrupted.
    """
    from scheduling.services import task_cancel

    unfinished = workflow.tasks.exclude(state__in=TERMINAL_STATES)
    if workflow.state != W.RUNNING and workflow.state != W.CANCELLED and not unfinished.exists():
        raise ApplicationError(
            f"the workflow has already ended ({workflow.state})",
            field="state",
            got=workflow.state,
            status=409,
        )
    Workflow.objects.filter(pk=workflow.pk, state=W.RUNNING).update(
        state=W.CANCELLED, reason=f"cancelled by {user.get_username()}"
    )
    # Downstream first (ids follow the DAG), so no task is released by an upstream one
    # ending meanwhile.
    for task in unfinished.order_by("-id"):
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
    if dep.state not in _BAD_ENDS:
        return None
    if dep.fail_action != "skip":
        return False
    # fail_action skip lets the dependants run as if it had succeeded (a user's cancel
    # included), unless the task never ran because an upstream abort cancelled it: an abort
    # stops everything downstream, through skip tasks too.
    return not (dep.state == S.CANCELLED and _cancelled_by_abort(dep))


def _cancelled_by_abort(task: Task) -> bool:
    """Whether an abort upstream of this cancelled skip task is what cancelled it.

    Walks up through cancelled skip tasks only (iteratively: chains may be long).
    """
    seen = {task.pk}
    todo = [task]
    while todo:
        for dep in todo.pop().depends_on.only("id", "state", "fail_action"):
            if dep.pk in seen:
                continue
            seen.add(dep.pk)
            if dep.state in _BAD_ENDS and dep.fail_action != "skip":
                return True
            if dep.state == S.CANCELLED:
                todo.append(dep)
    return False


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
        deps = list(task.depends_on.order_by("id").only("id", "name", "state", "fail_action"))
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
    """End the workflow once every task has ended; its state says how it went.

    It succeeds when every task succeeded, or ended in a way its fail_action (skip) forgives.
    """
    tasks = Task.objects.filter(workflow_id=workflow_id)
    # Called at every task's end: the cheap question first, so a big workflow is not read
    # whole a thousand times.
    if tasks.exclude(state__in=TERMINAL_STATES).exists():
        return
    tasks = list(tasks.only("id", "state", "fail_action"))
    if not tasks:
        return
    ok = all(dependency_verdict(task) for task in tasks)
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
    # join(root, "") ends in exactly one separator, also for the root "/".
    return any(real == root or real.startswith(os.path.join(root, "")) for root in trigger_roots())


def trigger_ready(path: str) -> bool:
    # Resolved again at every check: a symlink planted later must not lead outside the roots.
    return trigger_path_allowed(path) and os.path.exists(os.path.realpath(path))


def workflow_summary(workflow: Workflow) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for state in workflow.tasks.values_list("state", flat=True):
        counts[state] = counts.get(state, 0) + 1
    return counts


# --- the picture on the workflow page ------------------------------------------------------

BOX_W, BOX_H = 184, 58  # one task's box
GAP_X, GAP_Y = 64, 22  # between layers (columns), between boxes of a layer
PAD = 14


@dataclass(frozen=True, slots=True)
class DagBox:
    task: Task
    layer: int
    x: int
    y: int
    label: str  # the name, shortened to fit the box

    @property
    def cx(self) -> int:
        return self.x + BOX_W // 2


@dataclass(frozen=True, slots=True)
class DagEdge:
    path: str  # SVG path data, from the dependency's right side to the dependant's left
    kind: str  # done: the dependency lets it run; blocked: never will; open: not yet


@dataclass(frozen=True, slots=True)
class DagPicture:
    width: int
    height: int
    boxes: list[DagBox]
    edges: list[DagEdge]
    box_w: int = BOX_W
    box_h: int = BOX_H


def dag_picture(tasks: list[Task]) -> DagPicture:
    """Lay a workflow's DAG out left to right for an inline SVG.

    Layers by longest path from the roots (a task sits one column right of its furthest
    dependency); inside a layer, tasks are ordered by the mean row of their dependencies,
    which keeps most edges straight. `tasks` must have `depends_on` prefetched; ids of
    tasks outside the workflow are left out (the table lists them). No queries, no I/O.
    """
    by_id = {task.pk: task for task in tasks}
    deps = {task.pk: [d.pk for d in task.depends_on.all() if d.pk in by_id] for task in tasks}
    layer: dict[int, int] = {}
    # Ids follow the DAG (upstream tasks are stored first), but do not rely on it here.
    for task_id in _topological(deps):
        layer[task_id] = 1 + max((layer[d] for d in deps[task_id]), default=-1)
    columns: list[list[int]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for task_id in sorted(layer):
        columns[layer[task_id]].append(task_id)
    row: dict[int, float] = {}
    for column in columns:
        column.sort(key=lambda i: (_mean(row[d] for d in deps[i]), i))
        for position, task_id in enumerate(column):
            row[task_id] = position
    tallest = max((len(c) for c in columns), default=0)
    boxes: dict[int, DagBox] = {}
    for number, column in enumerate(columns):
        # Each column is centred on the tallest one.
        top = PAD + (tallest - len(column)) * (BOX_H + GAP_Y) // 2
        for position, task_id in enumerate(column):
            task = by_id[task_id]
            boxes[task_id] = DagBox(
                task=task,
                layer=number,
                x=PAD + number * (BOX_W + GAP_X),
                y=top + position * (BOX_H + GAP_Y),
                label=task.name if len(task.name) <= 22 else task.name[:21] + "…",
            )
    edges = []
    for task_id, dep_ids in deps.items():
        for dep_id in dep_ids:
            a, b = boxes[dep_id], boxes[task_id]
            x1, y1 = a.x + BOX_W, a.y + BOX_H // 2
            x2, y2 = b.x - 3, b.y + BOX_H // 2  # stop short: the arrow head ends at the box
            bend = max(GAP_X // 2, (x2 - x1) // 3)
            verdict = dependency_verdict(by_id[dep_id])
            edges.append(
                DagEdge(
                    path=f"M{x1},{y1} C{x1 + bend},{y1} {x2 - bend},{y2} {x2},{y2}",
                    kind="open" if verdict is None else "done" if verdict else "blocked",
                )
            )
    width = PAD * 2 + len(columns) * BOX_W + max(len(columns) - 1, 0) * GAP_X
    height = PAD * 2 + tallest * BOX_H + max(tallest - 1, 0) * GAP_Y
    return DagPicture(width=width, height=height, boxes=[boxes[t.pk] for t in tasks], edges=edges)


def _topological(deps: dict[int, list[int]]) -> list[int]:
    indegree = {task_id: len(d) for task_id, d in deps.items()}
    dependants: dict[int, list[int]] = {task_id: [] for task_id in deps}
    for task_id, dep_ids in deps.items():
        for dep_id in dep_ids:
            dependants[dep_id].append(task_id)
    ready = deque(sorted(i for i, n in indegree.items() if n == 0))
    order = []
    while ready:
        task_id = ready.popleft()
        order.append(task_id)
        for nxt in dependants[task_id]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    return order


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0
