"""Reads with permission checks: projects, their members, the audit log, the configuration
history; and the project page's storage warnings, which accounting provides at start."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.models import User
from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_date, parse_datetime

from portal import history, history_display, roles
from portal.errors import ApplicationError
from portal.models import AuditEvent, ConfigVersion, Project


def project_list_for_user(user: User) -> QuerySet[Project]:
    return Project.objects.filter(memberships__user=user).distinct()


def project_get_for_user(user: User, slug: str) -> Project | None:
    return Project.objects.filter(slug=slug, memberships__user=user).first()


def project_get_visible(user: User, slug: str) -> Project | None:
    """The project page's project: a platform admin and finance (read-only: they see every
    project's usage) see every project, anyone else those they are a member of; None for the
    rest (the caller answers 404)."""
    found = Project.objects.filter(slug=slug).first()
    if found is None or not (
        roles.sees_all_usage(user) or found.memberships.filter(user=user).exists()
    ):
        return None
    return found


def project_list_visible(user: User) -> QuerySet[Project]:
    """The projects page: every project for a platform admin and finance, one's own for
    anyone else."""
    projects = Project.objects.order_by("slug").select_related("pi")
    if not roles.sees_all_usage(user):
        projects = projects.filter(memberships__user=user)
    return projects


def project_memberships(project: Project, *, order: tuple[str, ...] = ("user__username",)):
    return project.memberships.select_related("user").order_by(*order)


def project_get_for_member(user: User, slug: str, *, field: str = "project") -> Project:
    """A project the user is a member of, or a 400 naming the field (never says whether the
    project exists: outsiders learn nothing)."""
    project = project_get_for_user(user, slug)
    if project is None:
        raise ApplicationError("you are not a member of this project", field=field, got=slug)
    return project


def audit_visible_to(user: User) -> QuerySet[AuditEvent]:
    """A platform admin reads every row; anyone else what they did themselves, what happened
    in the projects they lead and in the queues they administer."""
    rows = AuditEvent.objects.all()
    if roles.is_platform_admin(user):
        return rows
    led = list(
        Project.objects.filter(memberships__user=user, memberships__role="pi").values_list(
            "slug", flat=True
        )
    )
    queues = list(user.administered_queues.values_list("name", flat=True))
    return rows.filter(Q(actor_id=user.pk) | Q(project__in=led) | Q(queue__in=queues))


def audit_actions() -> list[tuple[str, str]]:
    """The audit log's actions, (value, label), for its filter."""
    return list(AuditEvent.Action.choices)


def audit_filter(rows: QuerySet[AuditEvent], params) -> QuerySet[AuditEvent]:
    """Narrow by `action`, `actor`, `project` and `since` (a date or time, ISO 8601)."""
    action = params.get("action") or ""
    if action:
        if action not in AuditEvent.Action.values:
            raise ApplicationError(
                f"must be one of {', '.join(AuditEvent.Action.values)}",
                field="action",
                got=action[:80],
            )
        rows = rows.filter(action=action)
    if params.get("actor"):
        rows = rows.filter(actor=params["actor"][:150])
    if params.get("project"):
        rows = rows.filter(project=params["project"][:63])
    since = params.get("since") or ""
    if since:
        when = _time(since) or _day(since)
        if when is None:
            raise ApplicationError(
                "must be a date (2026-12-01) or a time (2026-12-01T08:00Z)",
                field="since",
                got=since[:80],
            )
        rows = rows.filter(at__gte=when if when.tzinfo else when.replace(tzinfo=UTC))
    return rows


def _time(text: str) -> datetime | None:
    try:
        return parse_datetime(text)
    except ValueError:
        return None


def _day(text: str) -> datetime | None:
    try:
        day = parse_date(text)
    except ValueError:
        return None
    return datetime(day.year, day.month, day.day, tzinfo=UTC) if day else None


def config_versions_visible(user: User) -> QuerySet[ConfigVersion] | None:
    """The configuration history's versions the user reads (platform admins: all; queue admins:
    their queues'), newest first; None for anyone else, who has no such page (the caller
    answers 404)."""
    if not (roles.is_platform_admin(user) or roles.administered_queue_ids(user)):
        return None
    return history.versions_visible_to(user)


def config_version_get_visible(user: User, pk: int) -> ConfigVersion | None:
    """One version the user may read, with the version it restored; None otherwise."""
    return history.versions_visible_to(user).select_related("restores").filter(pk=pk).first()


def config_models() -> list[str]:
    """The models whose changes are versioned (app_label.model), for the API's filter."""
    return sorted(history.TRACKED)


def config_model_choices() -> list[tuple[str, str]]:
    """(app_label.model, name) of the versioned models, by name, for the history page."""
    return history_display.model_choices()


@dataclass(frozen=True)
class VersionPlace:
    """Where a version stands in its object's history, for its page; related objects in
    the diffs are named (portal/history_display.py)."""

    previous: int | None  # the id of the object's version before it
    later: int  # how many versions of the object came after it
    changes: list[tuple[str, Any, Any]]  # (field, before, after) this version made
    to_restore: list[tuple[str, Any, Any]]  # (field, now, then) a rollback to it would make
    to_undo: list[tuple[str, Any, Any]]  # (field, now, then) undoing it would make
    undo_refusal: str | None  # why it cannot be undone, whatever the site is now


def config_version_place(version: ConfigVersion) -> VersionPlace:
    same = ConfigVersion.objects.filter(model=version.model, object_id=version.object_id)
    current = same.order_by("-id").first()
    now = current.after if current else None
    previous = history.previous_version(version)
    label = version.model
    return VersionPlace(
        previous=previous.pk if previous is not None else None,
        later=same.filter(pk__gt=version.pk).count(),
        changes=history_display.named(label, history.diff(version.before, version.after)),
        to_restore=history_display.named(label, history.diff(now, version.after)),
        to_undo=history_display.named(
            label, history.diff(now, previous.after if previous is not None else None)
        ),
        undo_refusal=history.undo_refusal(version, previous),
    )


# The project page warns when a folder of the project passes its storage area's soft quota.
# What a folder holds is accounting's to know (its collectors measure it); accounting provides
# the reader when it starts (accounting/apps.py), so the organisation never imports it.
StorageWarningsReader = Callable[[Project], Sequence[Any]]
_storage_warnings: list[StorageWarningsReader] = []


def provide_storage_warnings(reader: StorageWarningsReader) -> None:
    """Register the reader of a project's storage warnings (each with `text` and
    `measured_at`); registering again replaces it."""
    _storage_warnings[:] = [reader]


def project_storage_warnings(project: Project) -> list[Any]:
    """The project's storage warnings; none when no app provides them."""
    return [w for reader in _storage_warnings for w in reader(project)]


# The project page shows the project's allocations (granted hours over dates, used to date,
# remaining) and a lead's request for more. They are accounting's (accounting/apps.py
# provides the reader), so the organisation never imports it.
AllocationsReader = Callable[[Project, User], dict[str, Any]]
_allocations: list[AllocationsReader] = []


def provide_project_allocations(reader: AllocationsReader) -> None:
    """Register the reader of a project page's allocation section; again replaces it."""
    _allocations[:] = [reader]


def project_allocations(project: Project, user: User) -> dict[str, Any] | None:
    """The project's allocation section for `user`; None when no app provides it."""
    return _allocations[0](project, user) if _allocations else None
