"""The one port other apps (accounting, simulation, portal, config) use into scheduling.

Besides the models and the pure modules (`decisions`, `sites`, `spec`, `descriptor`), other
apps read what scheduling knows through here, and nothing else of it: a change inside
scheduling (its selectors, services, engine) then shows here or nowhere. It never imports
the engine: what only the engine can read (the backends' own accounting) is provided to it
at app start (`scheduling.hooks`), and reaches accounting's passes through `runs_of` and
`accounted`. The portal's project page shows the project's quotas and offers its queues; the
usage report offers the queues and pools to group by; when a member leaves a project, their
own quotas go with them. Accounting reads the storage areas (their names and soft quotas) to
meter and warn. `/metrics` reads the active tasks, nodes and live sandboxes by group,
and the GPUs measured in use per pool (docs/operations.md). tests/unit/test_layout.py holds the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from portal.models import Project
from scheduling.decisions.types import Run
from scheduling.hooks import (
    AccountingUnavailable,
    close_backends,
    on_attempt_end,
    provide_allocated_projects,
    provide_allocation_reader,
    provide_budget_reader,
)
from scheduling.hooks import accounting as _accounting
from scheduling.models import Attempt, Quota
from scheduling.outbox import after_commit, send, storage_leave, storage_prepare
from scheduling.presenters.efficiency import efficiency_report
from scheduling.selectors import site_view_invalidate
from scheduling.selectors.access import task_get_for_user, task_list_for_member
from scheduling.selectors.capacity import image_caches_for_pools
from scheduling.selectors.gpuuse import used_gpus_last_hour
from scheduling.selectors.load import WAITING, load_now
from scheduling.selectors.metrics import active_task_groups, live_sandboxes, node_groups
from scheduling.selectors.policy import site_minute
from scheduling.selectors.queues import pool_names, queue_names
from scheduling.selectors.quota import project_quotas
from scheduling.selectors.site import node_view, site_view
from scheduling.selectors.storage import storage_areas
from scheduling.services.alerts import raise_alert

__all__ = [
    "WAITING",
    "AccountingUnavailable",
    "Run",
    "accounted",
    "active_task_groups",
    "after_commit",
    "close_backends",
    "efficiency_report",
    "image_caches_for_pools",
    "live_sandboxes",
    "load_now",
    "member_joined",
    "member_left",
    "member_quotas_delete",
    "node_groups",
    "node_view",
    "on_attempt_end",
    "pool_names",
    "project_quotas",
    "provide_allocated_projects",
    "provide_allocation_reader",
    "provide_budget_reader",
    "queue_names",
    "quota_resources",
    "raise_alert",
    "runs_of",
    "send",
    "site_minute",
    "site_view",
    "site_view_invalidate",
    "storage_areas",
    "task_get_for_user",
    "task_list_for_member",
    "used_gpus_last_hour",
]


def runs_of(attempts: Sequence[Attempt]) -> dict[int, list[Run] | None]:
    """Attempt id → its job's runs as its backend accounted them ([] when it never ran), or
    None when not accounted yet (asked again later). Attempts come with their task."""
    return _accounting().runs_of(attempts)


def accounted(alias: str, start: datetime, end: datetime) -> list[Run]:
    """What backend `alias` accounted of this portal's jobs that ended in [start, end).
    Raises AccountingUnavailable when its accounting cannot be read."""
    return _accounting().accounted(alias, start, end)


def quota_resources() -> list[tuple[str, Any]]:
    """What a quota can limit, as (value, label) choices."""
    return list(Quota.Resource.choices)


def member_joined(*, project: Project, user: User) -> None:
    """A member joined the project: a worker makes their folders and puts their job account
    in the project's group now, not at their first job (docs/storage.md)."""
    storage_prepare(user.pk)


def member_left(*, project: Project, user: User) -> None:
    """A member left the project: a worker takes their job account out of its group, so it
    reaches the project's folders no more (docs/storage.md)."""
    storage_leave(project.slug, user.pk)


def member_quotas_delete(*, project: Project, user: User) -> None:
    """A member left the project: their own quotas go, and the policy sees it at once."""
    Quota.objects.filter(project=project, user=user).delete()
    transaction.on_commit(site_view_invalidate)
