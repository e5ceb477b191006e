"""Reads of live sandboxes (docs/sandboxes.md): a sandbox is its project's members' to see
and use; for anyone else it does not exist (404). A scoped task token sees its project's."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db.models import Count, Exists, Max, OuterRef, QuerySet
from django.http import Http404
from django.utils import timezone

from portal.models import Membership
from scheduling.models import Sandbox, SandboxExec, Task
from scheduling.tokens import TaskScope

SANDBOX_ID_CHARS = frozenset("sbx-0123456789abcdef")


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


def with_activity(rows: QuerySet[Sandbox]) -> QuerySet[Sandbox]:
    now = timezone.now()
    in_flight = SandboxExec.objects.filter(
        sandbox=OuterRef("pk"), ended_at__isnull=True, deadline__gt=now
    )
    return rows.annotate(
        last_exec_end=Max("execs__ended_at"),
        busy=Exists(in_flight),
        execs_run=Count("execs"),
    )


def sandbox_get_for_user(
    user: User, public_id: str, *, scope: TaskScope | None = None, activity: bool = True
) -> Sandbox:
    """One sandbox of the user's projects, or a 404 (an id not even well formed included)."""
    if not isinstance(public_id, str) or len(public_id) > 32 or set(public_id) - SANDBOX_ID_CHARS:
        raise Http404("no such sandbox")
    rows = Sandbox.objects.select_related("task", "project")
    if scope is not None:
        rows = rows.filter(project__slug=scope.project)
    rows = rows.filter(
        project_id__in=Membership.objects.filter(user_id=user.pk).values("project_id")
    )
    if activity:
        rows = with_activity(rows)
    try:
        return rows.get(public_id=public_id)
    except Sandbox.DoesNotExist:
        raise Http404("no such sandbox") from None


def sandbox_execs(sandbox: Sandbox, *, limit: int = 200) -> list[SandboxExec]:
    """Its latest execs, oldest first (a terminal reads top to bottom)."""
    return list(reversed(sandbox.execs.order_by("-id")[:limit]))


def sandboxes_of_task(task: Task) -> list[Sandbox]:
    """The sandboxes a batch task created with its scoped token (its page lists them)."""
    return list(with_activity(task.sandboxes_created.all()).order_by("id"))


def sandbox_of_task(task: Task) -> Sandbox | None:
    """The sandbox a task of type `sandbox` is the session of, if any."""
    return Sandbox.objects.filter(task=task).first() if task.type == "sandbox" else None
