"""What the engine's tests on the fake backend share: submit a task, read its states."""

from __future__ import annotations

from scheduling.models import Task
from tests.conftest import descriptor, submit


def _submit(api, **overrides) -> Task:
    response = submit(api, descriptor(**overrides))
    assert response.status_code == 201, response.json()
    return Task.objects.get(pk=response.json()["id"])


def _states(task: Task) -> list[str]:
    return [e.to_state for e in task.events.order_by("at", "id")]
