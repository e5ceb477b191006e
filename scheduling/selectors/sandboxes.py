"""Reads of live sandboxes (docs/sandboxes.md): a sandbox is its project's members' to see
and use; for anyone else it does not exist (404). A scoped task token sees its project's."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth.models import User
from django.db.models import Count, Exists, OuterRef, QuerySet, Subquery
from django.http import Http404
from django.utils import timezone

from portal import hot
from portal.models import Membership
from scheduling.models import Sandbox, SandboxExec, Task
from scheduling.tokens import TaskScope

SANDBOX_ID_CHARS = frozenset("sbx-0123456789abcdef")
_HOT_FIELDS = (
    "public_id",
    "state",
    "ready_at",
    "ended_at",
    "end_reason",
    "last_active_at",
    "task__backend",
    "task__backend_id",
    "task__state",
    "task__reason",
    "task__started_at",
    "task__ended_at",
    "project__slug",
)


def sandbox_list_for_user(user: User, *, scope: TaskScope | None = None) -> QuerySet[Sandbox]:
    """The sandboxes of the user's projects (a scoped token: of its task's project only),
    each with its live activity (`last_exec_end`, `busy`, `execs_run`)."""
    rows = Sandbox.objects.select_related("task", "project", "owner")
    if scope is not None:
        rows = rows.filter(project__slug=scope.project)
    rows = rows.filter(
        project_id__in=Membership.objects.filter(user_id=user.pk).values("project_id")
    )
    return with_activity(rows)


def with_activity(
    rows: QuerySet[Sandbox], now: datetime | None = None, *, count: bool = True
) -> QuerySet[Sandbox]:
    """The sandboxes with `last_exec_end` (its latest exec's end), `busy` (an exec in flight
    within its deadline) and, with `count`, `execs_run` annotated: what idle time and the
    exec count are read from. Each an index step per sandbox (models/sandboxes.py)."""
    now = now or timezone.now()
    execs = SandboxExec.objects.filter(sandbox=OuterRef("pk"))
    rows = rows.annotate(
        last_exec_end=Subquery(
            execs.filter(ended_at__isnull=False).order_by("-ended_at").values("ended_at")[:1]
        ),
        busy=Exists(execs.filter(ended_at__isnull=True, deadline__gt=now)),
    )
    return rows.annotate(execs_run=Count("execs")) if count else rows


def sandbox_get_for_user(
    user: User, public_id: str, *, scope: TaskScope | None = None, activity: bool = True
) -> Sandbox:
    """One sandbox of the user's projects (a scoped token: of its task's project), or a 404
    (an id not even well formed included). Found by its id alone, then the membership asked
    of the web process's brief cache (portal/hot.py), as a submission asks it: a join with
    the memberships cost an exec a third of its time."""
    if not isinstance(public_id, str) or len(public_id) > 32 or set(public_id) - SANDBOX_ID_CHARS:
        raise Http404("no such sandbox")
    rows = Sandbox.objects.select_related("task", "project")
    # An exec's or a file's read takes only what reaching the backend needs.
    rows = with_activity(rows) if activity else rows.only(*_HOT_FIELDS)
    try:
        sandbox = rows.get(public_id=public_id)
    except Sandbox.DoesNotExist:
        raise Http404("no such sandbox") from None
    slug = sandbox.project.slug
    if (scope is not None and slug != scope.project) or hot.member_project(user, slug) is None:
        raise Http404("no such sandbox")
    return sandbox


def sandbox_execs(sandbox: Sandbox, *, limit: int = 200) -> list[SandboxExec]:
    """Its latest execs, oldest first (a terminal reads top to bottom)."""
    return list(reversed(sandbox.execs.order_by("-id")[:limit]))


def sandboxes_of_task(task: Task) -> list[Sandbox]:
    """The sandboxes a batch task created with its scoped token (its page lists them)."""
    return list(with_activity(task.sandboxes_created.all()).order_by("id"))


def sandbox_of_task(task: Task) -> Sandbox | None:
    """The sandbox a task of type `sandbox` is the session of, if any."""
    return Sandbox.objects.filter(task=task).first() if task.type == "sandbox" else None
