"""Writes on workflows from the portal: submit a whole DAG (all or nothing), and cancel it.

What happens while a workflow runs (releasing dependants, fail actions, wait timeouts,
triggers) is the engine's: `scheduling/engine/settle.py`. Ending a workflow whose tasks have
all ended is a write of its own (`workflow_refresh`), which the engine's settling calls too.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from portal import audit
from portal.errors import ApplicationError, ErrorItem
from portal.selectors import project_get_for_member
from scheduling import outbox, sealed
from scheduling.descriptor import DescriptorError, load_descriptor, topological_order
from scheduling.models import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    Task,
    TaskState,
    Workflow,
    WorkflowState,
)
from scheduling.selectors import tasks_visible_by_ids
from scheduling.selectors.dependencies import verdict
from scheduling.services.image_lookups import SubmissionDeadline, image_lookups
from scheduling.services.priority import priority_requests_room
from scheduling.services.submit_metrics import counted_submission
from scheduling.services.tasks import (
    descriptor_errors,
    sniff,
    task_cancel,
    task_create,
    task_decide,
    task_request_cancel,
    task_submit_spec,
)
from scheduling.spec import WorkflowSpec

W = WorkflowState


@counted_submission
def workflow_submit(*, user: User, text: str | bytes, fmt: str | None = None) -> Workflow:
    """Validate a whole DAG, decide every task, and store it all or nothing."""
    spec = _load(text, fmt)
    if not isinstance(spec, WorkflowSpec):
        raise ApplicationError(
            "this endpoint takes kind: Workflow; send single tasks to /api/v1/tasks/",
            field="kind",
            got="Task",
        )
    return workflow_submit_spec(user=user, spec=spec, descriptor=_text(text), fmt=fmt)


@counted_submission
def descriptor_submit(*, user: User, text: str | bytes, fmt: str | None = None) -> Task | Workflow:
    """Submit a descriptor of either kind: a Task is stored alone, a Workflow as its DAG."""
    spec = _load(text, fmt)
    text = _text(text)
    if isinstance(spec, WorkflowSpec):
        return workflow_submit_spec(user=user, spec=spec, descriptor=text, fmt=fmt)
    return task_submit_spec(user=user, spec=spec, descriptor=text, fmt=fmt or sniff(text))


def _load(text: str | bytes, fmt: str | None):
    try:
        return load_descriptor(text, fmt=fmt, max_bytes=settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES)
    except DescriptorError as exc:
        raise descriptor_errors(exc) from None


def _text(text: str | bytes) -> str:
    return text.decode("utf-8") if isinstance(text, bytes) else text


@counted_submission
def workflow_submit_spec(
    *, user: User, spec: WorkflowSpec, descriptor: str, fmt: str | None
) -> Workflow:
    """Decide every task of a parsed workflow against the site; store all of it or nothing.

    Every task's errors are reported at once, each field prefixed with `tasks[i].`.
    """
    project = project_get_for_member(user, spec.project)
    errors: list[ErrorItem] = []
    decided = {}
    upstream_ids: dict[str, list[Task]] = {}
    # Each image its tasks name is asked of its registry once, within one deadline.
    with image_lookups():
        for i, task_spec in enumerate(spec.tasks):
            # Both checks run for every task, so one round trip shows every problem.
            try:
                decided[task_spec.name] = task_decide(
                    task_spec, field_prefix=f"tasks[{i}]", user=user
                )
            except SubmissionDeadline:
                raise
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
    priority_requests_room(
        user, [f"tasks[{i}].priority" for i, t in enumerate(spec.tasks) if t.priority == "high"]
    )

    by_name = {t.name: t for t in spec.tasks}
    with transaction.atomic():
        workflow = Workflow.objects.create(
            project=project,
            owner=user,
            name=spec.name,
            descriptor=sealed.masked_descriptor(descriptor, fmt or sniff(descriptor)),
            descriptor_format=fmt or sniff(descriptor),
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
                descriptor=json.dumps(
                    sealed.shown_spec(task_spec.as_dict()), indent=2, ensure_ascii=False
                ),
                fmt="json",
                workflow=workflow,
                upstream=upstream,
            )
        # Tasks whose dependencies all ended before the workflow was stored start at once.
        outbox.settle([t.pk for t in created.values() if t.state == TaskState.WAITING])
        audit.record(
            audit.Action.WORKFLOW_SUBMIT,
            actor=user,
            target=f"workflow #{workflow.pk}",
            project=project.slug,
            detail={"name": workflow.name, "tasks": len(created)},
        )
    return workflow


def workflow_cancel(*, user: User, workflow: Workflow) -> Workflow:
    """Cancel every unfinished task of the workflow, running ones included.

    A running workflow ends `cancelled`; one that has already failed (an abort) keeps that
    state, but its tasks still running on other branches are cancelled too. Tasks without a
    backend job are cancelled at once; the jobs of the others are cancelled by a worker, all
    of them from one message. Cancelling again is a no-op.
    """
    unfinished = list(workflow.tasks.exclude(state__in=TERMINAL_STATES).order_by("-id"))
    if workflow.state != W.RUNNING and workflow.state != W.CANCELLED and not unfinished:
        raise ApplicationError(
            f"the workflow has already ended ({workflow.state})",
            field="state",
            got=workflow.state,
            status=409,
        )
    Workflow.objects.filter(pk=workflow.pk, state=W.RUNNING).update(
        state=W.CANCELLED, reason=f"cancelled by {user.get_username()}"
    )
    audit.record(
        audit.Action.WORKFLOW_CANCEL,
        actor=user,
        target=f"workflow #{workflow.pk}",
        project=workflow.project.slug,
        detail={"unfinished": len(unfinished)},
    )
    # Downstream first (ids follow the DAG). The end hooks of those cancelled here run in a
    # worker, from one message for them all.
    with_jobs = []
    ended: list[int] = []
    for task in unfinished:
        if task.state in ACTIVE_STATES:
            with_jobs.append(task)
            continue
        try:
            task_cancel(user=user, task=task, ended=ended)
        except ApplicationError as exc:
            if exc.status != 409:  # 409: it ended meanwhile, which is fine
                raise
    outbox.tasks_ended(ended)
    task_request_cancel(tasks=with_jobs, who=user.get_username())
    workflow_refresh(workflow.pk)
    workflow.refresh_from_db()
    return workflow


def workflow_refresh(workflow_id: int) -> None:
    """End the workflow once every task has ended; its state says how it went.

    It succeeds when every task succeeded, or ended in a way its fail_action (skip) forgives.
    """
    tasks = Task.objects.filter(workflow_id=workflow_id)
    # Called at every task's end: the cheap question first, so a big workflow is not read
    # whole a thousand times.
    if tasks.exclude(state__in=TERMINAL_STATES).exists():
        return
    ended = list(tasks.only("id", "state", "fail_action"))
    if not ended:
        return
    ok = all(verdict(task) for task in ended)
    now = timezone.now()
    Workflow.objects.filter(pk=workflow_id, state=W.RUNNING).update(
        state=W.SUCCEEDED if ok else W.FAILED,
        reason="every task succeeded or was skipped" if ok else "some tasks did not succeed",
    )
    Workflow.objects.filter(pk=workflow_id, ended_at__isnull=True).update(ended_at=now)
