"""Submissions as metrics: tasks stored and refused, by type and queue, and decision time.

`counted_submission` wraps each way in (one descriptor, a spec, a batch); only the outermost
call counts, so a descriptor that becomes a spec is one submission. `timed_decision` wraps
the decision of one task: it measures it and tells the submission around it what was decided
(or asked, when refused), so the counters need no second look at the site.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

from config.metrics import instruments
from portal.errors import ApplicationError
from scheduling.selectors import site_view
from scheduling.spec import TASK_TYPES, TaskSpec

F = TypeVar("F", bound=Callable[..., Any])

# What a refusal's first error names, as a reason label; any other field is "other".
REASONS = frozenset(
    {
        "project",
        "queue",
        "type",
        "resources",
        "walltime",
        "image",
        "inputs",
        "sandboxes",
        "depends_on",
        "priority",
        "tasks",
    }
)


@dataclass(slots=True)
class _Submission:
    decided: list[tuple[str, str]] = field(default_factory=list)
    asked: tuple[str, str] = ("", "")  # the type and queue of the spec last refused


_current: ContextVar[_Submission | None] = ContextVar("switchyard_submission", default=None)


def counted_submission(submit: F) -> F:
    @functools.wraps(submit)
    def counting(*args: Any, **kwargs: Any) -> Any:
        if not instruments.enabled() or _current.get() is not None:
            return submit(*args, **kwargs)
        submission = _Submission()
        token = _current.set(submission)
        try:
            result = submit(*args, **kwargs)
        except ApplicationError as exc:
            instruments.refused(*submission.asked, refusal_reason(exc))
            raise
        finally:
            _current.reset(token)
        instruments.submitted(submission.decided)
        return result

    return counting  # type: ignore[return-value]


def timed_decision(decide: F) -> F:
    @functools.wraps(decide)
    def timing(spec: TaskSpec, *args: Any, **kwargs: Any) -> Any:
        submission = _current.get()
        started = time.perf_counter()
        try:
            decided = decide(spec, *args, **kwargs)
        except ApplicationError:
            if submission is not None:
                submission.asked = asked_labels(spec)
            raise
        finally:
            instruments.decision_took(time.perf_counter() - started)
        if submission is not None:
            submission.decided.append((decided.type, decided.queue))
        return decided

    return timing  # type: ignore[return-value]


def asked_labels(spec: TaskSpec) -> tuple[str, str]:
    """The type and queue a refused spec asked for, as labels: only the site's own names (a
    client may write anything in a descriptor; each label value is a series)."""
    task_type = spec.type if spec.type in TASK_TYPES else ""
    queue = spec.queue if spec.queue and spec.queue in site_view().queues else ""
    return task_type or "", queue


def refusal_reason(exc: ApplicationError) -> str:
    """`quota_full` for a quota with no room now (409 from the quota check), `unavailable`
    for a registry or service that did not answer (503), else the first error's field
    without its place in a batch (`tasks[3].resources.gpus` → `resources`)."""
    first = (exc.errors[0].field or "") if exc.errors else ""
    if exc.status == 409:
        return "priority" if first.endswith("priority") else "quota_full"
    if exc.status == 503:
        return "unavailable"
    head = re.split(r"[.\[]", re.sub(r"^tasks\[\d+\]\.?", "", first), maxsplit=1)[0]
    if not head:
        return "tasks" if first.startswith("tasks") else "other"
    return head if head in REASONS else "other"
