"""The Capacity page: nodes as a table with what runs there, a drain that says what it
affects before it happens, the lend form's errors on their fields, and the nightly lease
schedules kept by a platform admin with a reason (docs/capacity.md)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from portal.models import ConfigVersion
from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.models import LeaseSchedule, Node, Queue, Task
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db


def _client(username: str) -> Client:
    client = Client()
    client.force_login(User.objects.get(username=username))
    return client


@pytest.fixture
def admin(site) -> Client:
    return _client("admin")


@pytest.fixture
def running(api) -> tuple[Node, Task]:
    """A 2-CPU task running on the first node of cpu-hpc."""
    node = Node.objects.filter(pool__name="cpu-hpc").order_by("name").first()
    response = submit(
        api,
        descriptor(name="md-run", type="hpc-simulation", resources={"cpus": 2, "memory": "1Gi"}),
    )
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, nodes=(node.name,))
    engine.backend_poll("fake")
    task.refresh_from_db()
    assert task.state == "running" and task.queue.pool.name == "cpu-hpc"
    return node, task


def _row(page: str, node: str) -> str:
    return page.split(f'id="node-{node}"', 1)[1].split("</tr>", 1)[0]


def test_nodes_are_a_table_with_cores_gpus_and_the_tasks_running_there(admin, running):
    node, task = running
    page = admin.get("/capacity/").content.decode()
    assert "<details" not in page.split('id="nodes"')[0].rsplit("<section", 1)[1]
    row = _row(page, node.name)
    assert f"2 / {node.cpus}" in row
    assert f"#{task.pk} md-run" in row
    gpu_node = Node.objects.filter(gpus__gt=0).first()
    assert f"0 / {gpu_node.gpus}" in _row(page, gpu_node.name)


def test_drain_asks_first_and_says_what_runs_there(site, running):
    node, task = running
    quinn = _client("quinn")
    asked = quinn.post(f"/capacity/nodes/{node.pk}/drained/", {"reason": "fan"})
    page = asked.content.decode()
    assert asked.status_code == 200
    assert f"Drain {node.name}?" in page
    assert "1 task runs there:" in page and f"#{task.pk} md-run" in page
    assert "they finish, nothing new starts." in page
    node.refresh_from_db()
    assert node.state == "up"  # nothing changed yet
    done = quinn.post(f"/capacity/nodes/{node.pk}/drained/", {"reason": "fan", "confirm": "yes"})
    assert done.status_code == 302
    node.refresh_from_db()
    assert node.state == "drained" and node.health.get("reason", "").startswith("fan")


def test_resume_needs_no_confirmation(admin, site):
    node = Node.objects.filter(pool__name="cpu-hpc").first()
    Node.objects.filter(pk=node.pk).update(state="drained")
    assert admin.post(f"/capacity/nodes/{node.pk}/up/").status_code == 302
    node.refresh_from_db()
    assert node.state == "up"


@pytest.mark.parametrize(
    ("typed", "field", "message"),
    [
        ({"until": "soon"}, "until", "must be a time"),
        ({"count": "two"}, "count", "a whole number of nodes"),
        ({"until": "30h"}, "until", "a lease lasts more than 0 s and at most 8h"),
        ({"queue": "hpc"}, "queue", "lend to a queue of another pool"),
    ],
)
def test_a_lend_error_sits_on_its_own_field(admin, typed, field, message):
    data = {"count": "1", "pool": "cpu-hpc", "queue": "training", "until": "4h", **typed}
    response = admin.post("/capacity/lend/", data)
    page = response.content.decode()
    assert response.status_code == 400 and 'id="not-saved"' in page
    assert page.count('class="field-error"') == 1
    assert message in page.split(f'id="error-{field}"', 1)[1].split("</span>", 1)[0]


def _schedule_data(prefix: str, **typed: str) -> dict[str, str]:
    data = {"pool": "inference-agent", "queue": "training", "count": "1", "start": "20:00"}
    data |= {"duration": "6h", "enabled": "on", "reason": "longer nights", **typed}
    return {f"{prefix}-{k}": v for k, v in data.items()}


def test_a_platform_admin_changes_a_nightly_lease_with_a_reason(admin):
    schedule = LeaseSchedule.objects.get()
    prefix = f"s{schedule.pk}"
    page = admin.get("/capacity/").content.decode()
    assert f'id="schedule-{prefix}"' in page
    response = admin.post(
        f"/capacity/schedules/{schedule.pk}/", _schedule_data(prefix, duration="7h30m")
    )
    assert response.status_code == 302
    schedule.refresh_from_db()
    assert schedule.duration_s == 7 * 3600 + 1800 and schedule.enabled
    version = ConfigVersion.objects.filter(model="scheduling.leaseschedule").latest("id")
    assert version.reason == "longer nights" and version.author_name == "admin"


def test_a_bad_nightly_lease_shows_one_error_and_not_saved(admin):
    schedule = LeaseSchedule.objects.get()
    prefix = f"s{schedule.pk}"
    before = schedule.duration_s
    response = admin.post(
        f"/capacity/schedules/{schedule.pk}/", _schedule_data(prefix, duration="9h")
    )
    page = response.content.decode()
    assert response.status_code == 400 and 'id="not-saved"' in page
    assert page.count('class="field-error"') == 1 and f'id="error-{prefix}-duration"' in page
    schedule.refresh_from_db()
    assert schedule.duration_s == before


def test_a_nightly_lease_is_added_and_removed_only_with_a_reason(admin):
    assert (
        admin.post("/capacity/schedules/", _schedule_data("new", start="21:30")).status_code == 302
    )
    added = LeaseSchedule.objects.get(start="21:30")
    refused = admin.post(f"/capacity/schedules/{added.pk}/", {"delete": "1"})
    assert refused.status_code == 400 and "say why" in refused.content.decode()
    removed = admin.post(
        f"/capacity/schedules/{added.pk}/", {"delete": "1", f"s{added.pk}-reason": "not needed"}
    )
    assert removed.status_code == 302 and not LeaseSchedule.objects.filter(pk=added.pk).exists()


def test_a_queue_admin_neither_sees_nor_edits_nightly_leases(site):
    quinn = _client("quinn")
    schedule = LeaseSchedule.objects.get()
    assert 'id="schedules"' not in quinn.get("/capacity/").content.decode()
    prefix = f"s{schedule.pk}"
    response = quinn.post(f"/capacity/schedules/{schedule.pk}/", _schedule_data(prefix))
    assert response.status_code == 404


def test_a_queue_admin_sees_the_room_but_not_the_names_of_another_queues_work(site, api):
    """HPC work may borrow a training node's idle cores: the training queue's admin sees the
    cores it holds, not the task, which does not exist for them (its own page is a 404)."""
    quinn = User.objects.get(username="quinn")
    quinn.administered_queues.set(Queue.objects.filter(name="training"))
    node = Node.objects.filter(pool__name="gpu-train").order_by("name").first()
    response = submit(
        api,
        descriptor(
            name="secret-run", type="hpc-simulation", resources={"cpus": 2, "memory": "1Gi"}
        ),
    )
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, nodes=(node.name,))
    engine.backend_poll("fake")
    client = _client("quinn")
    assert client.get(f"/tasks/{task.pk}/").status_code == 404
    row = _row(client.get("/capacity/").content.decode(), node.name)
    assert f"2 / {node.cpus}" in row
    assert "secret-run" not in row and f"#{task.pk}" not in row
    assert "1 other task (another queue's)" in row
    asked = client.post(f"/capacity/nodes/{node.pk}/drained/", {"reason": "fan"})
    page = asked.content.decode()
    assert "1 task runs there:" in page and "1 of another queue's;" in page
    assert "secret-run" not in page and "alice" not in page.split('id="confirm-what"')[1]
    # the platform admin sees it by name
    assert f"#{task.pk} secret-run" in _row(
        _client("admin").get("/capacity/").content.decode(), node.name
    )
