"""Reads: permission-checked fetches (`access`), the site's policy as decision values
(`site`), and what quotas hold now (`quota`)."""

from __future__ import annotations

from scheduling.selectors.access import (
    can_change_task,
    can_see_workflow,
    task_get_for_user,
    task_list_for_user,
    tasks_split_for_change,
    tasks_visible_by_ids,
    workflow_get_for_user,
    workflow_list_for_user,
)
from scheduling.selectors.site import (
    SiteView,
    borrowing_for_backend,
    node_view,
    node_views_for_backend,
    queue_policy,
    site_view,
    site_view_invalidate,
)

__all__ = [
    "SiteView",
    "borrowing_for_backend",
    "can_change_task",
    "can_see_workflow",
    "node_view",
    "node_views_for_backend",
    "queue_policy",
    "site_view",
    "site_view_invalidate",
    "task_get_for_user",
    "task_list_for_user",
    "tasks_split_for_change",
    "tasks_visible_by_ids",
    "workflow_get_for_user",
    "workflow_list_for_user",
]
