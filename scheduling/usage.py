"""What other apps may read of scheduling, and the one thing they tell it.

The portal's project page shows the project's quotas and offers its queues; the usage report
offers the queues and pools to group by; when a member leaves a project, their own quotas go
with them. Everything else of scheduling stays behind
this module.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from portal.models import Project
from scheduling.models import Quota
from scheduling.selectors import site_view_invalidate
from scheduling.selectors.queues import pool_names, queue_names
from scheduling.selectors.quota import project_quotas

__all__ = [
    "member_quotas_delete",
    "pool_names",
    "project_quotas",
    "queue_names",
    "quota_resources",
]


def quota_resources() -> list[tuple[str, Any]]:
    """What a quota can limit, as (value, label) choices."""
    return list(Quota.Resource.choices)


def member_quotas_delete(*, project: Project, user: AbstractBaseUser) -> None:
    """A member left the project: their own quotas go, and the policy sees it at once."""
    Quota.objects.filter(project=project, user=user).delete()
    transaction.on_commit(site_view_invalidate)
