"""Retention of tasks' working folders: a project area's `retention_days` removes the folders
`<project folder>/tasks/<task id>` of tasks that ended longer ago than that, and nothing else;
root's pass follows no link a member planted (docs/storage.md). Real folders, real accounts
(`make test` creates sy-alice and sy-bob), the admin console and the configuration history."""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.test import Client
from django.utils import timezone

from portal.models import ConfigVersion
from scheduling import engine
from scheduling.decisions.storage import expired_task_folders, task_folder_ids
from scheduling.engine.storage import expire_task_folders
from scheduling.models import Attempt, AttemptState, StorageArea, Task, TaskState
from scheduling.tasks import storage_housekeeping
from tests.conftest import descriptor, in_ci, submit
from tests.unit.scheduling.test_storage import run

NOW = timezone.now()


def test_only_decimal_task_ids_name_tasks_folders():
    names = ["12", "7", "007", "x", "12a", "", "-3", "١٢", "notes", "3"]
    assert task_folder_ids(names) == [3, 7, 12]


def test_a_task_folder_expires_only_past_the_retention_after_its_task_ended():
    ended = {1: NOW - timedelta(days=8), 2: NOW - timedelta(days=6), 3: None}
    assert expired_task_folders(ended, now=NOW, retention_days=7) == [1]
    assert expired_task_folders(ended, now=NOW, retention_days=None) == []
    assert expired_task_folders(ended, now=NOW, retention_days=1) == [1, 2]


def _task(api, project: str = "materials", **fields) -> Task:
    made = submit(api, descriptor(project=project))
    assert made.status_code == 201, made.json()
    Task.objects.filter(pk=made.json()["id"]).update(**fields)
    return Task.objects.get(pk=made.json()["id"])


def _ended(api, days: float, project: str = "materials") -> Task:
    return _task(
        api, project, state=TaskState.SUCCEEDED, ended_at=timezone.now() - timedelta(days=days)
    )


def _folder(path: Path, account: str = "sy-alice") -> Path:
    """A task's working folder with a file, made as its job's account would have made it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "out.txt").write_text("result\n")
    if os.geteuid() == 0:
        entry = pwd.getpwnam(account)
        for p in (path, path / "out.txt"):
            os.chown(p, entry.pw_uid, entry.pw_gid)
    return path


@pytest.fixture
def outside(areas) -> Iterator[Path]:
    """A folder of someone else's that no link may lead the pass into."""
    folder = areas.parent / f"{areas.name}-outside"
    (folder / "kept").mkdir(parents=True)
    (folder / "kept" / "precious").write_text("x")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.unix_groups  # the pass it ends with reconciles every project's group too
def test_an_area_removes_ended_tasks_folders_past_its_retention_and_nothing_else(
    api, outsider_api, areas, outside
):
    tasks = areas / "projects" / "materials" / "tasks"
    old = _ended(api, 10)
    recent = _ended(api, 2)
    running = _task(api, state=TaskState.RUNNING, started_at=timezone.now())
    lingering = _ended(api, 10)  # ended, but an attempt is still running on its node
    Attempt.objects.create(task=lingering, number=1, key=f"k{lingering.pk}", state="running")
    strangers = _ended(outsider_api, 10, project="genomics")  # not materials' task
    linked = _ended(api, 10)
    for task in (old, recent, running, lingering, strangers):
        _folder(tasks / str(task.pk))
    (_folder(tasks / str(old.pk)) / "link-out").symlink_to(outside / "kept")
    (tasks / str(linked.pk)).symlink_to(outside / "kept")  # a link where its folder was
    (tasks / "notes").mkdir()
    _folder(tasks / "999999")  # no such task

    # Kept forever while the area has no retention.
    assert expire_task_folders() == 0
    assert (tasks / str(old.pk) / "out.txt").exists()

    area = StorageArea.objects.get(name="projects")
    area.retention_days = 7
    area.full_clean()
    area.save()
    assert expire_task_folders() == 1
    assert not (tasks / str(old.pk)).exists()
    left = {p.name for p in tasks.iterdir()}
    assert left == {str(t.pk) for t in (recent, running, lingering, strangers, linked)} | {
        "notes",
        "999999",
    }
    # What the links pointed to is untouched: the link inside went with its folder, the one
    # in the folder's place stays.
    assert (outside / "kept" / "precious").read_text() == "x"
    assert (tasks / str(linked.pk)).is_symlink()
    assert expire_task_folders() == 0  # a second pass finds nothing more

    # The periodic pass a worker runs is this one, as the beat sends it.
    Task.objects.filter(pk=recent.pk).update(ended_at=timezone.now() - timedelta(days=8))
    beat = settings.CELERY_BEAT_SCHEDULE["storage-housekeeping"]
    assert beat["task"] == storage_housekeeping.name
    assert storage_housekeeping.apply().get()["folders_removed"] == 1
    assert not (tasks / str(recent.pk)).exists()


def test_a_tasks_folder_that_is_a_link_is_not_followed(outsider_api, areas, outside):
    gone = _ended(outsider_api, 30, project="genomics")
    project = areas / "projects" / "genomics"
    _folder(outside / str(gone.pk), "sy-bob")
    tasks = project / "tasks"
    if tasks.exists():
        os.rename(tasks, project / "tasks-before")
    tasks.symlink_to(outside)  # a member planted it: root must not remove what it leads to
    StorageArea.objects.filter(name="projects").update(retention_days=1)
    assert expire_task_folders() == 0
    assert (outside / str(gone.pk) / "out.txt").exists()
    assert (outside / "kept" / "precious").exists()


def test_retention_is_refused_where_no_tasks_folders_are_and_below_a_day(site):
    admin = Client()
    admin.force_login(User.objects.get(username="admin"))
    for name, days, error in (
        ("home", 30, "only a project area holds tasks&#x27; own folders"),
        ("projects", 0, "Ensure this value is greater than or equal to 1"),
    ):
        area = StorageArea.objects.get(name=name)
        response = admin.post(f"/admin/scheduling/storagearea/{area.pk}/change/", _form(area, days))
        assert response.status_code == 200, response.status_code
        assert error in response.content.decode()
        area.refresh_from_db()
        assert area.retention_days is None


def test_a_retention_change_is_a_version_of_the_configuration(site):
    admin = Client()
    admin.force_login(User.objects.get(username="admin"))
    area = StorageArea.objects.get(name="projects")
    response = admin.post(f"/admin/scheduling/storagearea/{area.pk}/change/", _form(area, 30))
    assert response.status_code == 302, response.content[:800]
    version = ConfigVersion.objects.filter(model="scheduling.storagearea").first()
    assert (version.author_name, version.action) == ("admin", "update")
    assert (version.before["retention_days"], version.after["retention_days"]) == (None, 30)
    page = admin.get(f"/config/{version.pk}/").content.decode()
    assert "retention_days" in page


def _form(area: StorageArea, days: int) -> dict:
    return {
        "name": area.name,
        "path": area.path,
        "owner": area.owner,
        "read_only": "on" if area.read_only else "",
        "pools": [p.pk for p in area.pools.all()],
        "quota_bytes": area.quota_bytes or "",
        "retention_days": days,
        "change_reason": "keep task folders a month",
    }


@pytest.mark.skipif(
    os.geteuid() != 0 and not in_ci(), reason="jobs run as other accounts only as root"
)
def test_a_real_jobs_working_folder_goes_once_its_retention_passed(api, areas):
    task, log = run(api, areas, "echo result > result.txt")
    workdir = areas / "projects" / "materials" / "tasks" / str(task.pk)
    assert (workdir / "result.txt").read_text() == "result\n", log
    engine.backend_poll("local")  # the portal learns that it ended
    task.refresh_from_db()
    assert task.state == TaskState.SUCCEEDED, task.reason
    assert Attempt.objects.get(task=task).state == AttemptState.SUCCEEDED
    StorageArea.objects.filter(name="projects").update(retention_days=3)
    assert expire_task_folders() == 0  # it just ended
    assert expire_task_folders(now=timezone.now() + timedelta(days=3, minutes=1)) == 1
    assert not workdir.exists() and workdir.parent.is_dir()


def test_an_area_beside_another_with_the_same_folders_is_refused(areas):
    projects = StorageArea.objects.get(name="projects")
    base = projects.path.removesuffix("/{project}")
    beside = StorageArea(name="people", path=base + "/{user}", owner="user")
    with pytest.raises(ValidationError) as refused:
        beside.full_clean()
    [message] = refused.value.message_dict["path"]
    assert "area projects" in message and f"got {base}/{{user}}" in message
    StorageArea(name="people", path=str(areas / "people" / "{user}"), owner="user").full_clean()
    projects.full_clean()  # itself is no other area
