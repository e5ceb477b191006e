"""The scheduling app's tables: the site (`site`), work (`tasks`), capacity (`capacity`),
storage areas (`storage`), the image catalogue (`images`), live sandboxes (`sandboxes`), and what projects may use of a
queue (`quotas`, `priority`)."""

from __future__ import annotations

from scheduling.models.capacity import (
    Alert,
    LeaseSchedule,
    LoadSample,
    NodeImageCache,
    NodeLease,
    PoolBorrowing,
)
from scheduling.models.images import CatalogueImage, ImageRegistry
from scheduling.models.priority import PriorityRequest
from scheduling.models.quotas import Quota
from scheduling.models.sandboxes import (
    LIVE_SANDBOX_STATES,
    Sandbox,
    SandboxEgress,
    SandboxExec,
    SandboxState,
)
from scheduling.models.site import (
    Canary,
    ClassifierSettings,
    Instance,
    LevelRule,
    Node,
    Pool,
    Queue,
    RoutingRule,
)
from scheduling.models.storage import StorageArea
from scheduling.models.tasks import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    UNSTARTED_STATES,
    Attempt,
    AttemptState,
    Hold,
    Task,
    TaskEvent,
    TaskState,
    Workflow,
    WorkflowState,
    attempt_key,
    new_key_salt,
)

__all__ = [
    "ACTIVE_STATES",
    "LIVE_SANDBOX_STATES",
    "Sandbox",
    "SandboxEgress",
    "SandboxExec",
    "SandboxState",
    "Alert",
    "LeaseSchedule",
    "LoadSample",
    "NodeImageCache",
    "NodeLease",
    "TERMINAL_STATES",
    "UNSTARTED_STATES",
    "Attempt",
    "Canary",
    "AttemptState",
    "ClassifierSettings",
    "Instance",
    "Hold",
    "LevelRule",
    "Node",
    "Pool",
    "PoolBorrowing",
    "PriorityRequest",
    "Queue",
    "Quota",
    "RoutingRule",
    "StorageArea",
    "CatalogueImage",
    "ImageRegistry",
    "Task",
    "TaskEvent",
    "TaskState",
    "Workflow",
    "WorkflowState",
    "attempt_key",
    "new_key_salt",
]
