"""The portal's writes: submit and cancel tasks and workflows. No backend is called here.

`tasks` holds single and batch submission and cancel; `workflows` a whole DAG's.
"""

from __future__ import annotations

from scheduling.services.capacity import lease_end, lease_open, nodes_set_state
from scheduling.services.preview import submit_preview
from scheduling.services.priority import priority_request_create, priority_request_decide
from scheduling.services.task_cancel_many import CancelReport, task_cancel_many
from scheduling.services.tasks import (
    Decided,
    task_cancel,
    task_create,
    task_decide,
    task_request_cancel,
    task_submit,
    task_submit_batch,
    task_submit_spec,
)
from scheduling.services.workflows import (
    descriptor_submit,
    workflow_cancel,
    workflow_submit,
    workflow_submit_spec,
)

__all__ = [
    "Decided",
    "descriptor_submit",
    "lease_end",
    "lease_open",
    "nodes_set_state",
    "priority_request_create",
    "priority_request_decide",
    "submit_preview",
    "task_cancel",
    "task_cancel_many",
    "CancelReport",
    "task_create",
    "task_decide",
    "task_request_cancel",
    "task_submit",
    "task_submit_batch",
    "task_submit_spec",
    "workflow_cancel",
    "workflow_submit",
    "workflow_submit_spec",
]
