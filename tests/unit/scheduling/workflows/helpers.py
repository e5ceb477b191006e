"""What the workflow tests on the fake backend share: task and workflow builders, the diamond,
and `Flow`, which drives the engine by hand; the fixtures are in this folder's conftest."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from django.utils import timezone

from scheduling import engine
from scheduling.backends import JobState
from scheduling.backends.fake import FakeBackend
from scheduling.engine import get_backend
from scheduling.models import Task, Workflow


def task(name: str, *deps: str | int, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "resources": {"cpus": 1, "memory": "1Gi"},
        "walltime": "10m",
        "command": ["true"],
        **fields,
    }
    if deps:
        body["depends_on"] = list(deps)
    return body


def workflow(*tasks: dict[str, Any], name: str = "wf", project: str = "materials") -> dict:
    return {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": name,
        "project": project,
        "tasks": list(tasks),
    }


DIAMOND = (task("a"), task("b", "a"), task("c", "a"), task("d", "b", "c"))


@pytest.fixture(autouse=True)
def _eager_celery():
    """A dispatch enqueued on commit runs at once, in this process, not through a broker."""
    from config.celery import app

    saved = app.conf.task_always_eager, app.conf.task_eager_propagates
    app.conf.task_always_eager = app.conf.task_eager_propagates = True
    yield
    app.conf.task_always_eager, app.conf.task_eager_propagates = saved


class Flow:
    """Drives a workflow through the engine the way the worker would."""

    def __init__(self, api, capture) -> None:
        self.api = api
        self.capture = capture
        self.backend = get_backend("fake")
        self.workflow: Workflow | None = None

    @contextlib.contextmanager
    def run(self):
        """Run what the block schedules on commit (settling, dispatch) at its end."""
        with self.capture(execute=True):
            yield

    def submit(self, *tasks: dict[str, Any], **fields: Any) -> Workflow:
        with self.run():
            response = self.api.post(
                "/api/v1/workflows/",
                data=json.dumps(workflow(*tasks, **fields)),
                content_type="application/json",
            )
        assert response.status_code == 201, response.json()
        self.workflow = Workflow.objects.get(pk=response.json()["id"])
        return self.workflow

    def task(self, name: str) -> Task:
        return self.workflow.tasks.get(name=name)

    def state(self, name: str) -> str:
        return self.task(name).state

    def states(self) -> dict[str, str]:
        return dict(self.workflow.tasks.values_list("name", "state"))

    def jobs(self, name: str) -> list[str]:
        prefix = f"sy-{self.task(name).pk}-"
        return sorted(key for key in FakeBackend.jobs_for("fake") if key.startswith(prefix))

    def finish(self, name: str, state: JobState, exit_code: int | None = None) -> Task:
        """The backend reports the task's current job in `state`; the engine polls."""
        current = self.task(name)
        assert current.backend_id, f"{name} has no job ({current.state}: {current.reason})"
        self.backend.finish(current.backend_id, state, exit_code=exit_code)
        with self.run():
            engine.backend_poll("fake")
        return self.task(name)

    def retry_now(self, name: str) -> str:
        """Let the backoff pass (rather than sleep through it) and dispatch the next attempt."""
        current = self.task(name)
        assert current.state == "pending" and current.not_before > timezone.now()
        assert engine.task_dispatch(current.pk) == "not-claimed", "the backoff was not respected"
        Task.objects.filter(pk=current.pk).update(not_before=timezone.now())
        with self.run():
            return engine.task_dispatch(current.pk)

    def refreshed(self) -> Workflow:
        self.workflow.refresh_from_db()
        return self.workflow


@pytest.fixture
def flow(api, django_capture_on_commit_callbacks) -> Flow:
    return Flow(api, django_capture_on_commit_callbacks)


def _events(task: Task) -> list[tuple[str, str]]:
    return [(e.from_state, e.to_state) for e in task.events.order_by("at", "id")]


def _post(api, doc) -> Any:
    body = doc if isinstance(doc, str) else json.dumps(doc)
    return api.post("/api/v1/workflows/", data=body, content_type="application/json")
