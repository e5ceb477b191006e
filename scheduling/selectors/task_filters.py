"""The task list's filters: read from the query string, checked, applied to the tasks a user
may see (docs/console.md, "The task list").

A value the list cannot use (an unknown state, a date that is not YYYY-MM-DD, a text longer
than any name) is reported field by field and the filter is left out; the page still
answers, never a 500. A value that is well formed but matches nothing (a project you are not
in) is simply an empty list.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import date, datetime, time, timedelta
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import QueryDict
from django.utils import timezone

from portal.errors import ErrorItem
from portal.models import Project
from portal.selectors import project_list_for_user
from scheduling.models import Queue, Task, TaskState

MAX_TEXT = 150  # longer than any name, slug or username the site stores
STATES = frozenset(TaskState.values)


@dataclass(frozen=True, slots=True)
class TaskFilters:
    project: str = ""
    owner: str = ""
    type: str = ""
    state: str = ""
    queue: str = ""
    submitted_from: date | None = None
    submitted_to: date | None = None
    q: str = ""

    @property
    def active(self) -> bool:
        return any(getattr(self, f.name) for f in fields(self))

    def query(self, **extra: object) -> str:
        """The filters as a query string (for the pager and the 2-s refresh)."""
        pairs = [(f.name, _text(getattr(self, f.name))) for f in fields(self)]
        pairs += [(k, str(v)) for k, v in extra.items()]
        return urlencode([(k, v) for k, v in pairs if v])


PARAMETERS = tuple(f.name for f in fields(TaskFilters))


def _text(value: object) -> str:
    if value is None:
        return ""
    return value.isoformat() if isinstance(value, date) else str(value)


def parse_task_filters(params: QueryDict) -> tuple[TaskFilters, list[ErrorItem]]:
    """The filters the query string asks for, and what is wrong with the rest."""
    found: dict[str, object] = {}
    errors: list[ErrorItem] = []
    for name in PARAMETERS:
        raw = params.get(name, "").strip()
        if not raw:
            continue
        if len(raw) > MAX_TEXT:
            errors.append(
                ErrorItem(name, f"at most {MAX_TEXT} characters", f"{len(raw)} characters")
            )
        elif name == "state" and raw not in STATES:
            errors.append(ErrorItem(name, f"one of {', '.join(TaskState.values)}", raw))
        elif name.startswith("submitted_"):
            try:
                found[name] = date.fromisoformat(raw)
            except ValueError:
                errors.append(ErrorItem(name, "a date as YYYY-MM-DD", raw))
        else:
            found[name] = raw
    filters = TaskFilters(**found)  # type: ignore[arg-type]
    if (
        filters.submitted_from
        and filters.submitted_to
        and filters.submitted_from > filters.submitted_to
    ):
        errors.append(
            ErrorItem(
                "submitted_to",
                f"on or after the start date ({filters.submitted_from.isoformat()})",
                filters.submitted_to.isoformat(),
            )
        )
        filters = replace(filters, submitted_to=None)
    return filters, errors


def _midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def filter_tasks(tasks: QuerySet[Task], filters: TaskFilters) -> QuerySet[Task]:
    """`tasks` (already those the user may see) narrowed by the filters. Exact matches on
    indexed or small columns; the name search is a case-insensitive substring."""
    exact = {
        "project__slug": filters.project,
        "owner__username": filters.owner,
        "type": filters.type,
        "state": filters.state,
        "queue__name": filters.queue,
    }
    tasks = tasks.filter(**{k: v for k, v in exact.items() if v})
    if filters.q:
        tasks = tasks.filter(name__icontains=filters.q)
    if filters.submitted_from:
        tasks = tasks.filter(submitted_at__gte=_midnight(filters.submitted_from))
    if filters.submitted_to:  # the whole of the last day
        tasks = tasks.filter(submitted_at__lt=_midnight(filters.submitted_to + timedelta(days=1)))
    return tasks


def filter_choices(user: User) -> dict[str, list[str]]:
    """What the filters' lists offer: the user's projects (every one, for a platform admin)
    and the queues (public: the Queues page lists them all)."""
    projects = Project.objects.all() if user.is_superuser else project_list_for_user(user)
    return {
        "projects": list(projects.order_by("slug").values_list("slug", flat=True)),
        "queues": list(Queue.objects.order_by("name").values_list("name", flat=True)),
    }


def task_page(
    tasks: QuerySet[Task], number: str | None, *, per_page: int = 50
) -> tuple[Page, list[Task]]:
    """One page of `tasks`, newest first: the page's ids, then only those rows. Sorting the
    ids alone is what keeps the list fast: sorting whole rows (descriptor and spec included)
    to keep 50 was most of the page's time with 100,000 tasks (bench/bench_console.py)."""
    page = Paginator(tasks.order_by("-id").values_list("pk", flat=True), per_page).get_page(number)
    ids = list(page.object_list)
    return page, list(tasks.filter(pk__in=ids).order_by("-id")) if ids else []
