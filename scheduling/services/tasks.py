"""Writes on tasks from the portal: submit (one, or a batch), and cancel.

No backend is called from here: a submission is stored and its dispatch published on commit;
a cancel of a task with a backend job is stored as a request that a worker carries out
(`scheduling/engine/jobs.py`).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from config.bulk import bulk_insert, insert_together, next_id
from portal import audit, hot
from portal.errors import ApplicationError, ErrorItem, prefixed
from portal.models import Project
from portal.selectors import project_get_for_member, project_get_for_user
from scheduling import decisions, outbox, sealed
from scheduling.decisions.canary import in_canary
from scheduling.decisions.quota import Ask, Reject, admit
from scheduling.decisions.refit import guessed_note, other_fits
from scheduling.descriptor import DescriptorError, load_task, parse_document, parse_task
from scheduling.models import ACTIVE_STATES, Hold, Task, TaskEvent, TaskState
from scheduling.selectors import SiteView, site_view, tasks_visible_by_ids
from scheduling.selectors.policy import policy_fields
from scheduling.selectors.quota import queue_usage, with_budgets
from scheduling.services.image_lookups import SubmissionDeadline, image_lookups
from scheduling.services.images import task_image, warning_events
from scheduling.services.priority import priority_request_from_descriptor, priority_requests_room
from scheduling.services.sandbox_input import batch_sandboxes_check
from scheduling.services.submit_metrics import counted_submission, timed_decision
from scheduling.services.task_paths import task_paths
from scheduling.services.task_storage import check_task_inputs
from scheduling.spec import TaskSpec
from scheduling.states import task_set_state

S = TaskState


@counted_submission
def task_submit(*, user: User, text: str | bytes, fmt: str | None = None) -> Task:
    """Validate a descriptor, classify and route it, store the task and enqueue its dispatch.

    Nothing is stored when any check fails; the error names the field.
    """
    try:
        spec = load_task(text, fmt=fmt, max_bytes=settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES)
    except DescriptorError as exc:
        raise descriptor_errors(exc) from None
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    return task_submit_spec(user=user, spec=spec, descriptor=text, fmt=fmt or sniff(text))


def descriptor_errors(
    exc: DescriptorError, message: str = "invalid descriptor"
) -> ApplicationError:
    return ApplicationError(
        message, errors=[ErrorItem(e.field, e.message, e.got) for e in exc.errors]
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Decided:
    """A task spec the site accepts, with where it goes and why."""

    spec: TaskSpec
    type: str
    classify_reason: str
    queue: str
    routing_reason: str
    canary: int | None = None  # the canary whose rules routed it (docs/console.md)
    warnings: tuple[str, ...] = ()  # recorded as events on the task (a deprecated image)


@timed_decision
def task_decide(
    spec: TaskSpec, *, field_prefix: str = "", user: User | None = None, draw: bool = True
) -> Decided:
    """Classify, route and check one spec against the site, or raise naming the field.

    With the submitting `user`, the task's quotas are checked too: a task asking more than a
    quota allows at all is refused, and so is one over a quota that refuses (docs/policy.md).
    `draw=False` (the preview): an active canary takes no share; the current rules decide.
    """
    site = site_view()
    canary = None
    if draw and site.canary is not None and in_canary(random.random(), site.canary[1]):
        canary = site.canary[0]
    classified = decisions.classify(spec, site.classifier)
    routed = decisions.route(spec, classified.type, site.arm(canary).rules, site.queues)
    if isinstance(routed, decisions.Refused):
        raise ApplicationError(
            routed.reason + _guessed(spec, classified, site, canary),
            field=prefixed(field_prefix, routed.field),
            got=spec.queue,
        )
    queue, backend = site.queues[routed.queue], site.queue_backends[routed.queue]
    refused = decisions.check(spec, queue, site.capacity(queue.pool))
    if refused is not None:
        raise ApplicationError(
            refused.reason + _guessed(spec, classified, site, canary),
            field=prefixed(field_prefix, refused.field),
            got=decisions.check_asked(spec, refused.field),
        )
    field = prefixed(field_prefix, "sandboxes") or "sandboxes"
    batch_sandboxes_check(spec, queue=routed.queue, backend=backend, field=field)
    spec, warnings = task_image(
        spec,
        pool=queue.pool,
        backend=backend,
        task_type=classified.type,
        catalogue=site.images,
        field=prefixed(field_prefix, "image") or "image",
    )
    spec = task_paths(
        spec,
        site.storage,
        pool=queue.pool,
        user=user.get_username() if user is not None else "",
        prefix=f"{field_prefix}." if field_prefix else "",
    )
    check_task_inputs(spec, site.storage, pool=queue.pool, user=user, field_prefix=field_prefix)
    if spec.walltime_s is None and queue.default_walltime_s:
        spec = dataclasses.replace(spec, walltime_s=queue.default_walltime_s)
    if user is not None:
        _check_quotas(spec, routed.queue, user, field_prefix)
    reason = f"{routed.reason} (canary #{canary})" if canary else routed.reason
    return Decided(spec, classified.type, classified.reason, routed.queue, reason, canary, warnings)


def _guessed(
    spec: TaskSpec, classified: decisions.Classified, site: SiteView, canary: int | None
) -> str:
    """For a guessed type: that it was guessed, by which rule, and the types that would fit."""
    if spec.type is not None:
        return ""
    rules = site.arm(canary).rules
    fits = other_fits(spec, classified.type, rules, site.queues, site.capacity)
    return guessed_note(classified, fits, spec.walltime_s)


def _check_quotas(spec: TaskSpec, queue: str, user: User, prefix: str) -> None:
    """Refuse at once what admission would refuse (admission stays the authority)."""
    site = site_view()
    rules = site.quota_rules(spec.project, queue)
    if not rules:
        return
    ask = Ask(spec.project, queue, user.get_username(), spec.resources.gpus, spec.resources.cpus)
    usage = (
        with_budgets(queue_usage(site.queue_ids[queue]), rules)
        if any(r.over_quota == "reject" for r in rules)
        else {}
    )
    decision = admit(ask, rules, usage, cohort=site.quota_cohort(spec.project, queue))
    if isinstance(decision, Reject):
        raise ApplicationError(
            decision.reason,
            field=prefixed(prefix, decision.field),
            got=ask.amount(decision.field.split(".")[-1]) if decision.field else None,
            status=400 if decision.never else 409,
        )


@counted_submission
def task_submit_spec(*, user: User, spec: TaskSpec, descriptor: str, fmt: str) -> Task:
    project = hot.member_project(user, spec.project)
    if project is None:
        project = project_get_for_member(user, spec.project)  # raises, naming the field
    decided = task_decide(spec, user=user)
    upstream = tasks_visible_by_ids(user, spec.depends_on_ids, field="depends_on")
    priority_requests_room(user, ["priority"] if spec.priority == "high" else [])
    if (
        upstream
        or spec.trigger_file
        or spec.priority == "high"
        or connection.vendor != "postgresql"
    ):
        with transaction.atomic():
            task = task_create(
                user=user,
                project=project,
                decided=decided,
                descriptor=descriptor,
                fmt=fmt,
                upstream=upstream,
            )
            _submit_entry(task, user, project, decided).save(force_insert=True)
            if task.state == S.WAITING:
                # Its dependencies may all have ended already: the engine settles it on commit.
                outbox.settle([task.pk])
        return task
    # The usual submission on PostgreSQL: the task, its first event and its audit row in one
    # round trip once the task's id is drawn, instead of BEGIN, three INSERTs and COMMIT.
    task = new_task(user=user, project=project, decided=decided, descriptor=descriptor, fmt=fmt)
    task.pk = next_id(Task)
    events = [first_event(task, user, decided), *warning_events(task, decided.warnings)]
    insert_together([task, *events, _submit_entry(task, user, project, decided)])
    outbox.dispatch(task.pk)
    return task


def _submit_entry(task: Task, user: User, project: Project, decided: Decided):
    return audit.entry(
        audit.Action.TASK_SUBMIT,
        actor=user,
        target=f"task #{task.pk}",
        project=project.slug,
        queue=decided.queue,
        detail={"name": task.name, "type": task.type},
    )


def task_create(
    *, user: User, decided: Decided, upstream: Sequence[Task] = (), **fields: Any
) -> Task:
    """Store one decided task and its first event; schedule what comes next on commit.

    `fields` are `new_task`'s other arguments (project, descriptor, fmt, workflow). A task
    with dependencies or a trigger starts `waiting`: the caller asks the engine to settle it
    (`outbox.settle`, one message for all it stores); the others are dispatched. Call inside
    a transaction.
    """
    task = new_task(user=user, decided=decided, upstream=upstream, **fields)
    task.save(force_insert=True)
    if upstream:
        task.depends_on.add(*upstream)
    for event in (first_event(task, user, decided), *warning_events(task, decided.warnings)):
        event.save(force_insert=True)
    if decided.spec.priority == "high":
        priority_request_from_descriptor(task, user=user, now=task.submitted_at)
    if task.state != S.WAITING:
        outbox.dispatch(task.pk)
    return task


def new_task(
    *,
    user: User,
    project: Project,
    decided: Decided,
    descriptor: str,
    fmt: str,
    workflow=None,
    upstream: Sequence[Task] = (),
    now: datetime | None = None,
    site: SiteView | None = None,
) -> Task:
    """The task row of a decided spec, not yet saved (a batch's rows share `now` and
    `site`)."""
    spec = decided.spec
    now = now or timezone.now()
    holds = bool(upstream) or bool(spec.trigger_file)
    site = site or site_view()
    return Task(
        **policy_fields(site, decided, now=now, ready=not holds),
        project=project,
        owner=user,
        workflow=workflow,
        name=spec.name,
        # Secret values never stored in clear: masked in the descriptor, sealed in the spec.
        descriptor=sealed.masked_descriptor(descriptor, fmt),
        descriptor_format=fmt,
        spec=sealed.stored_spec(spec.as_dict()),
        declared_type=spec.type or "",
        type=decided.type,
        classify_reason=decided.classify_reason,
        queue_id=site.queue_ids[decided.queue],
        routing_reason=decided.routing_reason,
        backend=site.queue_backends[decided.queue],
        priority=spec.priority,
        retry_count=spec.retry_count,
        fail_action=spec.fail_action,
        wait_timeout_s=spec.wait_timeout_s,
        trigger_file=spec.trigger_file or "",
        state=S.WAITING if holds else S.PENDING,
        submitted_at=now,
        waiting_since=now if holds else None,
        hold=(Hold.DEPENDENCY if upstream else Hold.TRIGGER) if holds else "",
        reason="waiting for its dependencies" if holds else "waiting for the dispatcher",
    )


def first_event(task: Task, user: User, decided: Decided, *, how: str = "") -> TaskEvent:
    """The task's first event (`submitted by …`, then `how`, e.g. " in a batch of 3"), not
    yet saved; the task has its id."""
    return TaskEvent(
        task=task,
        at=task.submitted_at,
        from_state="",
        to_state=task.state,
        message=f"submitted by {user.get_username()}{how}; {decided.classify_reason}; "
        f"{decided.routing_reason}",
    )


def task_cancel(*, user: User, task: Task, ended: list[int] | None = None) -> Task:
    """Cancel a task. Cancelling a cancelled task is a no-op; a finished one is a conflict.

    A task with no backend job (waiting, pending) is cancelled here and now, and a message
    (`outbox.tasks_ended`) has a worker run the task-end hooks: its dependants settled, its
    queue's held tasks reconsidered, the owner mailed. A caller that cancels many passes
    `ended`: the id is added there, and the caller publishes one message for them all. One
    with a job (queued, running) gets a cancel request: a worker cancels the job and then
    the task (`task.cancelling` until then). A dispatcher that is submitting a pending task
    when it is cancelled finds it cancelled and takes the job it made back.
    """
    who = user.get_username()
    for _ in range(5):  # the engine may move the task meanwhile; re-read and try again
        if task.state == S.CANCELLED:
            return task
        if task.is_terminal:
            raise ApplicationError(
                f"the task has already ended ({task.state})",
                field="state",
                got=task.state,
                status=409,
            )
        if task.state in ACTIVE_STATES:
            if task.cancel_requested_at is None:
                with transaction.atomic():
                    task_request_cancel(tasks=[task], who=who)
                    _audit_cancel(user, task, asked=True)
                task.refresh_from_db()
            if task.state in ACTIVE_STATES:
                return task
            continue  # it ended or went back to pending meanwhile
        with transaction.atomic():
            to, reason = S.CANCELLED, f"cancelled by {who}"
            if task_set_state(task=task, to=to, reason=reason, settle=False):
                _audit_cancel(user, task, asked=False)
                if ended is None:
                    outbox.tasks_ended([task.pk])
                else:
                    ended.append(task.pk)
                return task
        task.refresh_from_db()
    raise ApplicationError("the task is changing state too fast; try again", status=409)


def _audit_cancel(user: User, task: Task, *, asked: bool) -> None:
    audit.record(
        audit.Action.TASK_CANCEL,
        actor=user,
        target=f"task #{task.pk}",
        project=task.project.slug,
        queue=task.queue.name,
        detail={"job_cancel_requested": asked} if asked else {},
    )


def task_request_cancel(*, tasks: list[Task], who: str) -> list[int]:
    """Record a cancel request on tasks that have a backend job; one message carries them out.

    Returns the ids that got a new request (a task already asked to cancel is left alone).
    """
    now = timezone.now()
    asked = []
    with transaction.atomic():
        for task in tasks:
            reason = f"cancelling: asked by {who}"
            if Task.objects.filter(
                pk=task.pk, state__in=ACTIVE_STATES, cancel_requested_at=None
            ).update(
                cancel_requested_at=now, cancel_requested_by=who, reason=reason, updated_at=now
            ):
                TaskEvent.objects.create(
                    task=task, at=now, from_state=task.state, to_state=task.state, message=reason
                )
                asked.append(task.pk)
        outbox.cancel(asked)
    return asked


def sniff(text: str) -> str:
    return "json" if text.lstrip().startswith("{") else "yaml"


@counted_submission
def task_submit_batch(*, user: User, text: str | bytes) -> list[int]:
    """Many independent tasks in one request (a parameter sweep): all stored, or none.

    The body is `{"tasks": [descriptor, ...]}`; every descriptor is validated and decided like
    a single submission, errors name `tasks[i].field`, and the rows are written with bulk
    inserts in one transaction. One message dispatches them all (the sweep covers its loss).
    Batched tasks may not depend on anything or wait for a trigger: that is a workflow.
    """
    limit = settings.SWITCHYARD_BATCH_MAX_TASKS
    try:
        data = parse_document(text, fmt="json", max_bytes=settings.SWITCHYARD_BATCH_MAX_BYTES)
    except DescriptorError as exc:
        raise descriptor_errors(exc, "invalid batch") from None
    docs = data.get("tasks")
    if set(data) != {"tasks"} or not isinstance(docs, list) or not docs:
        raise ApplicationError(
            'the body must be {"tasks": [descriptor, ...]} with at least one task',
            field="tasks",
        )
    if len(docs) > limit:
        raise ApplicationError(f"at most {limit} tasks in one batch", field="tasks", got=len(docs))

    with image_lookups():  # each image asked once, within one deadline for the batch
        decided, projects = _decide_batch(user, docs)
    priority_requests_room(
        user, [f"tasks[{i}].priority" for i, d in enumerate(decided) if d.spec.priority == "high"]
    )

    site = site_view()
    now = timezone.now()
    member_of = {slug: project for slug, project in projects.items() if project is not None}
    with transaction.atomic():
        tasks = bulk_insert(
            [
                new_task(
                    user=user,
                    project=member_of[d.spec.project],
                    decided=d,
                    descriptor=json.dumps(sealed.mask_document(doc)[0], ensure_ascii=False),
                    fmt="json",
                    now=now,
                    site=site,
                )
                for d, doc in zip(decided, docs, strict=True)
            ],
        )
        how = f" in a batch of {len(tasks)}"
        bulk_insert(
            [first_event(task, user, d, how=how) for task, d in zip(tasks, decided, strict=True)]
            + [
                e
                for t, d in zip(tasks, decided, strict=True)
                for e in warning_events(t, d.warnings)
            ],
        )
        ids = [task.pk for task in tasks]
        for task, d in zip(tasks, decided, strict=True):
            if d.spec.priority == "high":
                priority_request_from_descriptor(task, user=user, now=now)
        outbox.dispatch_many(ids)
        audit.record(
            audit.Action.TASK_SUBMIT,
            actor=user,
            target=f"{len(ids)} tasks #{ids[0]}–#{ids[-1]} (a batch)",
            project=",".join(sorted({d.spec.project for d in decided}))[:63],
            detail={"count": len(ids), "ids": [ids[0], ids[-1]]},
        )
    return ids


def _decide_batch(user: User, docs: list) -> tuple[list[Decided], dict[str, Project | None]]:
    """Every task of a batch decided, or one ApplicationError listing what is wrong with
    them (at most about 100 problems); a registry past the submission's deadline is a 503
    at once. With the projects the batch names (None: the user is not a member)."""
    errors: list[ErrorItem] = []
    decided: list[Decided] = []
    projects: dict[str, Project | None] = {}
    for i, doc in enumerate(docs):
        prefix = f"tasks[{i}]"
        try:
            spec = parse_task(doc)
        except DescriptorError as exc:
            errors += [ErrorItem(prefixed(prefix, e.field), e.message, e.got) for e in exc.errors]
            continue
        if spec.project not in projects:
            projects[spec.project] = project_get_for_user(user, spec.project)
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
            decided.append(task_decide(spec, field_prefix=prefix, user=user))
        except SubmissionDeadline:
            raise
        except ApplicationError as exc:
            errors += exc.errors
        if len(errors) >= 100:
            break  # enough to fix; the rest after
    if errors:
        raise ApplicationError("invalid batch", errors=errors)
    return decided, projects
