"""The states as pages offer them in their filters: (value, label) in the lifecycle's order."""

from __future__ import annotations

from scheduling.models import TaskState, WorkflowState

TASK_STATE_CHOICES: list[tuple[str, str]] = list(TaskState.choices)
WORKFLOW_STATE_CHOICES: list[tuple[str, str]] = list(WorkflowState.choices)
