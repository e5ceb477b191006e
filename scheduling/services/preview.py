"""What a submission would become, without storing anything: the submit page's live preview,
and the API's (`POST /api/v1/tasks/preview/`, which `switchyard submit --dry-run` calls).

It runs the checks a real submission runs, in the same order and through the same functions
(`task_decide`: classify, route, check against the queue and its pool, image, paths, quotas;
then the dependencies and the priority requests), so what the preview says is what the
submit does. Where the submit would refuse, the preview shows the same errors; where it would
accept, the quotas the task counts against, what admission would do now and when the task
could start (docs/policy.md, "Before you submit").

One difference only: an active canary takes a share of real submissions by chance, and the
preview does not draw; it says that a canary may route the task by its own rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.contrib.auth.models import User
from django.utils import timezone

from portal import hot
from portal.errors import ApplicationError, ErrorItem
from portal.selectors import project_get_for_member
from scheduling import decisions
from scheduling.decisions.refit import other_fits
from scheduling.descriptor import DescriptorError, load_descriptor, load_task
from scheduling.selectors import SiteView, site_view, tasks_visible_by_ids
from scheduling.selectors.outlook import Outlook, outlook
from scheduling.services.priority import priority_requests_room
from scheduling.services.tasks import task_decide
from scheduling.spec import TaskSpec


@dataclass(frozen=True, slots=True)
class TaskPreview:
    """One task as the submit would decide it; `errors` empty: it would be accepted."""

    name: str
    type: str
    declared: bool
    classify_reason: str
    queue: str | None  # None: no queue takes it
    routing_reason: str
    # For a guessed type: the other types whose queue would take it, with the advice to
    # write that type (and an estimate, where its queue requires one).
    others: tuple[tuple[str, str], ...] = ()
    errors: tuple[ErrorItem, ...] = ()
    status: int = 200  # with errors: the HTTP status the submit would answer (400, 409, …)
    outlook: Outlook | None = None  # quotas and start; for an accepted single task

    @property
    def accepted(self) -> bool:
        return not self.errors


@dataclass(frozen=True, slots=True)
class Preview:
    kind: str  # "task", "workflow", or "" when the descriptor did not parse
    tasks: tuple[TaskPreview, ...] = ()
    errors: tuple[ErrorItem, ...] = ()  # the descriptor's own, or the project's
    canary: str = ""
    at: datetime = field(default_factory=timezone.now)
    error_status: int = 400  # with `errors`: the HTTP status the submit would answer

    @property
    def accepted(self) -> bool:
        return not self.errors and all(t.accepted for t in self.tasks)

    @property
    def status(self) -> int:
        """What the submit would answer: 200 where it would store it, else its refusal's
        status (the descriptor's or project's first, then the first refused task's)."""
        if self.errors:
            return self.error_status
        return next((t.status for t in self.tasks if not t.accepted), 200)


def submit_preview(
    *, user: User, text: str | bytes, fmt: str | None = None, task_only: bool = False
) -> Preview:
    """What submitting `text` as `user` would do now; stores nothing, raises nothing a
    submission's checks raise (they come back as the preview's errors). `task_only`: read it
    as `task_submit` does (the API's `POST /api/v1/tasks/`), a Task descriptor alone; else as
    the submit page does, a Task or a Workflow."""
    load = load_task if task_only else load_descriptor
    try:
        spec = load(text, fmt=fmt, max_bytes=settings.SWITCHYARD_DESCRIPTOR_MAX_BYTES)
    except DescriptorError as exc:
        return Preview("", errors=tuple(ErrorItem(e.field, e.message, e.got) for e in exc.errors))
    site = site_view()
    canary = ""
    if site.canary is not None:
        canary = (
            f"canary #{site.canary[0]} routes {site.canary[1]}% of submissions by its own "
            "rules: this one may be among them"
        )
    if hot.member_project(user, spec.project) is None:
        try:
            project_get_for_member(user, spec.project)
        except ApplicationError as exc:
            tasks = spec.tasks if not isinstance(spec, TaskSpec) else (spec,)
            shapes = tuple(_shape(t, site) for t in tasks)
            kind = "task" if isinstance(spec, TaskSpec) else "workflow"
            errors = tuple(exc.errors)
            return Preview(kind, shapes, errors, canary, error_status=exc.status)
    if isinstance(spec, TaskSpec):
        return Preview("task", (_task(user, spec, site),), canary=canary)
    previews = tuple(
        _decided(user, task, site, prefix=f"tasks[{i}]") for i, task in enumerate(spec.tasks)
    )
    return Preview("workflow", previews, canary=canary)


def _task(user: User, spec: TaskSpec, site: SiteView) -> TaskPreview:
    """A single task: decided as `task_submit_spec` decides it, then its quotas and start."""
    preview = _decided(user, spec, site, prefix="")
    if not preview.accepted:
        return preview
    try:
        tasks_visible_by_ids(user, spec.depends_on_ids, field="depends_on")
        priority_requests_room(user, ["priority"] if spec.priority == "high" else [])
    except ApplicationError as exc:
        return _with_errors(preview, exc)
    assert preview.queue is not None  # accepted: it has one
    seen = outlook(
        site,
        spec,
        task_type=preview.type,
        queue=preview.queue,
        user=user.get_username(),
        now=timezone.now(),
    )
    return dataclasses.replace(preview, outlook=seen)


def _decided(user: User, spec: TaskSpec, site: SiteView, *, prefix: str) -> TaskPreview:
    try:
        # No canary draw: the preview shows the current rules and says a canary may differ.
        decided = task_decide(spec, field_prefix=prefix, user=user, draw=False)
    except ApplicationError as exc:
        return _with_errors(_shape(spec, site), exc)
    return TaskPreview(
        name=spec.name,
        type=decided.type,
        declared=spec.type is not None,
        classify_reason=decided.classify_reason,
        queue=decided.queue,
        routing_reason=decided.routing_reason,
        others=_others(spec, decided.type, site),
    )


def _shape(spec: TaskSpec, site: SiteView) -> TaskPreview:
    """Type and queue alone, where the submission is refused before or after routing."""
    classified = decisions.classify(spec, site.classifier)
    routed = decisions.route(spec, classified.type, site.rules, site.queues)
    queue = None if isinstance(routed, decisions.Refused) else routed.queue
    return TaskPreview(
        name=spec.name,
        type=classified.type,
        declared=spec.type is not None,
        classify_reason=classified.reason,
        queue=queue,
        routing_reason=routed.reason,
        others=_others(spec, classified.type, site),
    )


def _others(spec: TaskSpec, task_type: str, site: SiteView) -> tuple[tuple[str, str], ...]:
    if spec.type is not None:
        return ()
    fits = other_fits(spec, task_type, site.rules, site.queues, site.capacity)
    return tuple((fit.type, fit.advice(spec.walltime_s)) for fit in fits)


def _with_errors(preview: TaskPreview, exc: ApplicationError) -> TaskPreview:
    return dataclasses.replace(preview, errors=tuple(exc.errors), status=exc.status)
