"""The access matrix for `POST /api/v1/tasks/preview/`: every role gets what the submit of the
same body would give it (helpers.py has the roles), and the preview itself stores nothing."""

from __future__ import annotations

import json

import pytest

from portal.models import AuditEvent
from scheduling.models import Task
from tests.conftest import descriptor, submit
from tests.unit.portal.access_matrix.helpers import ROLES, World, _clients

PREVIEW = "/api/v1/tasks/preview/"
SHOULD_SEE = {"member": 200, "lead": 200, "other": 400, "anonymous": (401, 403)}


def _bodies(w: World) -> dict[str, dict]:
    training = {"type": "ai-training", "resources": {"gpus": 8, "cpus": 16}}
    return {
        "materials": descriptor(type="hpc-simulation", resources={"cpus": 4}, walltime="1h"),
        "genomics": descriptor(project="genomics", walltime="3h", estimate="3h", **training),
        # A dependency on another project's task: refused as one that does not exist.
        "upstream": descriptor(depends_on=[w.task_g.pk]),
    }


@pytest.mark.parametrize("role", ROLES)
def test_every_role_gets_what_the_submit_would_give_it(world, role):
    api = _clients(role)[1]
    for what, doc in _bodies(world).items():
        before = (Task.objects.count(), AuditEvent.objects.count())
        preview = api.post(PREVIEW, data=json.dumps(doc), content_type="application/json")
        assert (Task.objects.count(), AuditEvent.objects.count()) == before, (what, role)
        submitted = submit(api, doc)
        status = submitted.status_code
        assert preview.status_code == (200 if status == 201 else status), (what, role)
        if status == 201:
            task = Task.objects.get(pk=submitted.json()["id"])
            assert (preview.json()["type"], preview.json()["queue"]) == (
                task.type,
                task.queue.name,
            )
        else:
            assert preview.json()["errors"] == submitted.json()["errors"], (what, role)
        expected = SHOULD_SEE.get(role) if what == "materials" else None
        if expected is not None:
            assert preview.status_code in (expected if isinstance(expected, tuple) else (expected,))


def test_anothers_task_as_a_dependency_is_not_told_apart_from_none(world):
    api = _clients("member")[1]
    doc = _bodies(world)["upstream"]
    shown = api.post(PREVIEW, data=json.dumps(doc), content_type="application/json").json()
    assert shown["errors"] == [
        {
            "field": "depends_on",
            "message": f"no task #{world.task_g.pk} among your projects' tasks",
            "got": world.task_g.pk,
        }
    ]
    assert shown["quotas"] == [] and shown["start"] is None
