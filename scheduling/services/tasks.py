"""Writes on tasks: submit, cancel, and the one state-transition service every change goes through."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from portal.errors import ApplicationError, ErrorItem
from portal.models import Project
from scheduling import decisions
from scheduling.backends import BackendError, get_backend
from scheduling.descriptor import DescriptorError, load_task
from scheduling.models import TERMINAL_STATES, Task, TaskEvent, TaskState
from scheduling.selectors import site_view
from scheduling.spec import TaskSpec

S = TaskState

# Every move the state machine allows. Terminal states have no way out.
TRANSITIONS: dict[str, frozenset[str]] = {
    S.PENDING: frozenset(
        {S.WAITING, S.QUEUED, S.RUNNING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.SKIPPED}
    ),
    S.WAITING: frozenset({S.PENDING, S.CANCELLED, S.SKIPPED, S.FAILED}),
    S.QUEUED: frozenset(
        {S.RUNNING, S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.SKIPPED}
    ),
    S.RUNNING: frozenset({S.PENDING, S.SUCCEEDED, S.FAILED, S.CANCELLED, S.TIMEOUT, S.SKIPPED}),
    **{state: frozenset() for state in TERMINAL_STATES},
}


class TransitionError(Exception):
    pass


def task_set_state(
    *,
    task: Task,
    to: str,
    message: str = "",
    reason: str | None = None,
    fields: dict[str, Any] | None = None,
    settle: bool = True,
) -> bool:
    """Move `task` from the state it was read in to `to`, if nobody moved it meanwhile.

    The update is conditional on the state read (compare-and-set), so two workers racing on
    one task cannot both move it. Returns False when the task had moved on; the caller's view
    of it is stale and it must not act on it. Writes the TaskEvent of the move.

    When the task ends, its dependants are settled at once (released, or cancelled when it
    failed with fail_action abort) and its workflow's state follows; `settle=False` is for
    the settling loop itself, which works through the DAG without recursion.
    """
    frm = task.state
    if to not in TRANSITIONS[frm]:
        raise TransitionError(f"task {task.pk}: {frm} → {to} is not allowed")
    now = timezone.now()
    values: dict[str, Any] = {"state": to, "updated_at": now, **(fields or {})}
    if reason is not None:
        values["reason"] = reason
    if to in TERMINAL_STATES and "ended_at" not in values:
        values["ended_at"] = now
    with transaction.atomic():
        moved = Task.objects.filter(pk=task.pk, state=frm).update(**values)
        if not moved:
            return False
        TaskEvent.objects.create(
            task=task, at=now, from_state=frm, to_state=to, message=message or (reason or "")
        )
    for name, value in values.items():
        setattr(task, name, value)
    if settle and to in TERMINAL_STATES:
        from scheduling import workflows

        workflows.after_end(task)
    return True


def task_submit(*, user: AbstractBaseUser, text: str | bytes, fmt: str | None = None) -> Task:
    """Validate a descriptor, classify and route it, store the task and enqueue its dispatch.

    Nothing is stored when any check fails; the error names the field.
    """
    from django.conf import settings

    try:
        spec = load_task(text, fmt=fmt, max_bytes=settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES)
    except DescriptorError as exc:
        raise ApplicationError(
            "invalid descriptor",
            errors=[ErrorItem(e.field, e.message, e.got) for e in exc.errors],
        ) from None
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return task_submit_spec(user=user, spec=spec, descriptor=text, fmt=fmt or _sniff(text))


@dataclasses.dataclass(frozen=True, slots=True)
class Decided:
    """A task spec the site accepts, with where it goes and why."""

    spec: TaskSpec
    type: str
    classify_reason: str
    queue: str
    routing_reason: str


def task_decide(spec: TaskSpec, *, field_prefix: str = "") -> Decided:
    """Classify, route and check one spec against the site, or raise naming the field."""
    site = site_view()
    classified = decisions.classify(spec)
    routed = decisions.route(spec, classified.type, site.rules, site.queues)
    if isinstance(routed, decisions.Refused):
        raise ApplicationError(
            routed.reason, field=_prefixed(field_prefix, routed.field), got=spec.queue
        )
    queue = site.queues[routed.queue]
    refused = decisions.check(spec, queue, site.capacity(queue.pool))
    if refused is not None:
        raise ApplicationError(refused.reason, field=_prefixed(field_prefix, refused.field))
    if spec.trigger_file:
        from scheduling.workflows import trigger_path_allowed, trigger_roots

        if not trigger_path_allowed(spec.trigger_file):
            raise ApplicationError(
                f"must be under one of the trigger roots: {', '.join(trigger_roots())}",
                field=_prefixed(field_prefix, "trigger.file"),
                got=spec.trigger_file,
            )
    if spec.walltime_s is None and queue.default_walltime_s:
        spec = dataclasses.replace(spec, walltime_s=queue.default_walltime_s)
    return Decided(spec, classified.type, classified.reason, routed.queue, routed.reason)


def _prefixed(prefix: str, field: str | None) -> str | None:
    if not prefix:
        return field
    return f"{prefix}.{field}" if field else prefix


def project_for_member(user: AbstractBaseUser, slug: str) -> Project:
    project = Project.objects.filter(slug=slug, memberships__user=user).first()
    if project is None:
        raise ApplicationError("you are not a member of this project", field="project", got=slug)
    return project


def task_submit_spec(*, user: AbstractBaseUser, spec: TaskSpec, descriptor: str, fmt: str) -> Task:
    project = project_for_member(user, spec.project)
    decided = task_decide(spec)
    from scheduling.selectors import tasks_visible_by_ids

    upstream = tasks_visible_by_ids(user, spec.depends_on_ids, field="depends_on")
    with transaction.atomic():
        task = task_create(
            user=user,
            project=project,
            decided=decided,
            descriptor=descriptor,
            fmt=fmt,
            upstream=upstream,
        )
    return task


def task_create(
    *,
    user: AbstractBaseUser,
    project: Project,
    decided: Decided,
    descriptor: str,
    fmt: str,
    workflow=None,
    upstream: list[Task] = (),
) -> Task:
    """Store one decided task and its first event; schedule what comes next on commit.

    A task with dependencies or a trigger starts `waiting`; the others are dispatched.
    Call inside a transaction.
    """
    spec = decided.spec
    now = timezone.now()
    holds = bool(upstream) or bool(spec.trigger_file)
    task = Task.objects.create(
        project=project,
        owner=user,
        workflow=workflow,
        name=spec.name,
        descriptor=descriptor,
        descriptor_format=fmt,
        spec=spec.as_dict(),
        declared_type=spec.type or "",
        type=decided.type,
        classify_reason=decided.classify_reason,
        queue_id=site_view().queue_ids[decided.queue],
        routing_reason=decided.routing_reason,
        backend=site_view().queue_backends[decided.queue],
        priority=spec.priority,
        retry_count=spec.retry_count,
        fail_action=spec.fail_action,
        wait_timeout_s=spec.wait_timeout_s,
        trigger_file=spec.trigger_file or "",
        state=S.WAITING if holds else S.PENDING,
        waiting_since=now if holds else None,
        reason="waiting for its dependencies" if holds else "waiting for the dispatcher",
    )
    if upstream:
        task.depends_on.add(*upstream)
    TaskEvent.objects.create(
        task=task,
        at=task.submitted_at,
        from_state="",
        to_state=task.state,
        message=f"submitted by {user.get_username()}; {decided.classify_reason}; "
        f"{decided.routing_reason}",
    )
    if holds:
        from scheduling import workflows

        pk = task.pk
        transaction.on_commit(lambda: workflows.settle_waiting([pk]))
    else:
        _enqueue_dispatch(task.pk)
    return task


def task_cancel(*, user: AbstractBaseUser, task: Task) -> Task:
    """Cancel a task. Cancelling a cancelled task is a no-op; a finished one is a conflict."""
    if task.state == S.CANCELLED:
        return task
    if task.is_terminal:
        raise ApplicationError(
            f"the task has already ended ({task.state})", field="state", got=task.state, status=409
        )
    who = user.get_username()
    for _ in range(5):  # the engine may move the task meanwhile; re-read and try again
        if task.backend_id and task.state in (S.QUEUED, S.RUNNING):
            try:
                get_backend(task.backend).cancel(task.backend_id)
            except BackendError as exc:
                raise ApplicationError(
                    f"the scheduler could not be reached to cancel the job: {exc}", status=503
                ) from exc
        if task_set_state(task=task, to=S.CANCELLED, reason=f"cancelled by {who}"):
            return task
        task.refresh_from_db()
        if task.is_terminal:
            if task.state == S.CANCELLED:
                return task
            raise ApplicationError(
                f"the task has already ended ({task.state})", field="state", status=409
            )
    raise ApplicationError("the task is changing state too fast; try again", status=409)


def task_log(*, task: Task, offset: int = 0, limit: int = 1 << 20) -> str:
    """The output of the task's current (or last) attempt so far."""
    if not task.backend_id:
        return ""
    try:
        return get_backend(task.backend).log(task.backend_id, offset=offset, limit=limit)
    except BackendError as exc:
        raise ApplicationError(f"the log could not be read: {exc}", status=503) from exc


def _enqueue_dispatch(task_id: int, *, countdown: float = 0) -> None:
    from scheduling.tasks import dispatch

    transaction.on_commit(lambda: _publish(dispatch, task_id, countdown))


def _publish(celery_task: Any, task_id: int, countdown: float = 0) -> None:
    # A broker that is down must not turn a stored task into a 500: the sweep will dispatch it.
    try:
        if countdown:
            celery_task.apply_async((task_id,), countdown=countdown)
        else:
            celery_task.delay(task_id)
    except Exception:  # noqa: BLE001 - any broker failure; the sweep is the safety net
        import logging

        logging.getLogger(__name__).warning(
            "could not enqueue dispatch of task %s; the sweep will", task_id, exc_info=True
        )


def _sniff(text: str) -> str:
    return "json" if text.lstrip().startswith("{") else "yaml"


def spec_to_descriptor(data: dict[str, Any]) -> str:
    """The text stored for a task built from form fields: the same JSON the API would take."""
    return json.dumps(data, indent=2, sort_keys=False)


def task_submit_batch(*, user: AbstractBaseUser, text: str | bytes) -> list[int]:
    """Many independent tasks in one request (a parameter sweep): all stored, or none.

    The body is `{"tasks": [descriptor, ...]}`; every descriptor is validated and decided like
    a single submission, errors name `tasks[i].field`, and the rows are written with bulk
    inserts in one transaction. One message dispatches them all (the sweep covers its loss).
    Batched tasks may not depend on anything or wait for a trigger: that is a workflow.
    """
    from django.conf import settings

    from scheduling.descriptor import DescriptorError, parse_document, parse_task

    limit = settings.SWITCHYARD_BATCH_MAX_TASKS
    try:
        data = parse_document(text, fmt="json", max_bytes=settings.SWITCHYARD_BATCH_MAX_BYTES)
    except DescriptorError as exc:
        raise ApplicationError(
            "invalid batch", errors=[ErrorItem(e.field, e.message, e.got) for e in exc.errors]
        ) from None
    docs = data.get("tasks")
    if set(data) != {"tasks"} or not isinstance(docs, list) or not docs:
        raise ApplicationError(
            'the body must be {"tasks": [descriptor, ...]} with at least one task',
            field="tasks",
        )
    if len(docs) > limit:
        raise ApplicationError(f"at most {limit} tasks in one batch", field="tasks", got=len(docs))

    errors: list[ErrorItem] = []
    decided: list[Decided] = []
    projects: dict[str, Project | None] = {}
    for i, doc in enumerate(docs):
        prefix = f"tasks[{i}]"
        try:
            spec = parse_task(doc)
        except DescriptorError as exc:
            errors += [ErrorItem(_prefixed(prefix, e.field), e.message, e.got) for e in exc.errors]
            continue
        if spec.project not in projects:
            projects[spec.project] = Project.objects.filter(
                slug=spec.project, memberships__user=user
            ).first()
        if projects[spec.project] is None:
            errors.append(
                ErrorItem(f"{prefix}.project", "you are not a member of this project", spec.project)
            )
            continue
        if spec.depends_on_ids or spec.trigger_file:
            errors.append(
                ErrorItem(prefix, "a batched task cannot depend or wait; submit a workflow", None)
            )
            continue
        try:
            decided.append(task_decide(spec, field_prefix=prefix))
        except ApplicationError as exc:
            errors += exc.errors
        if len(errors) >= 100:
            break  # enough to fix; the rest after
    if errors:
        raise ApplicationError("invalid batch", errors=errors)

    site = site_view()
    now = timezone.now()
    who = user.get_username()
    with transaction.atomic():
        tasks = Task.objects.bulk_create(
            [
                Task(
                    project=projects[d.spec.project],
                    owner=user,
                    name=d.spec.name,
                    descriptor=json.dumps(doc),
                    descriptor_format="json",
                    spec=d.spec.as_dict(),
                    declared_type=d.spec.type or "",
                    type=d.type,
                    classify_reason=d.classify_reason,
                    queue_id=site.queue_ids[d.queue],
                    routing_reason=d.routing_reason,
                    backend=site.queue_backends[d.queue],
                    priority=d.spec.priority,
                    retry_count=d.spec.retry_count,
                    fail_action=d.spec.fail_action,
                    wait_timeout_s=d.spec.wait_timeout_s,
                    reason="waiting for the dispatcher",
                    submitted_at=now,
                )
                for d, doc in zip(decided, docs, strict=True)
            ],
            batch_size=500,
        )
        TaskEvent.objects.bulk_create(
            [
                TaskEvent(
                    task=task,
                    at=now,
                    from_state="",
                    to_state=S.PENDING,
                    message=f"submitted by {who} in a batch of {len(tasks)}; "
                    f"{d.classify_reason}; {d.routing_reason}",
                )
                for task, d in zip(tasks, decided, strict=True)
            ],
            batch_size=500,
        )
        ids = [task.pk for task in tasks]
        from scheduling.tasks import dispatch_many

        transaction.on_commit(lambda: _publish_many(dispatch_many, ids))
    return ids


def _publish_many(celery_task: Any, ids: list[int]) -> None:
    try:
        celery_task.delay(ids)
    except Exception:  # noqa: BLE001 - any broker failure; the sweep is the safety net
        import logging

        logging.getLogger(__name__).warning(
            "could not enqueue dispatch of %d tasks; the sweep will", len(ids), exc_info=True
        )
