"""A member who leaves a project leaves its Unix group: their job account reaches the
project's folders no more (docs/storage.md). Real Unix accounts (sy-alice, sy-bob: `make test`
creates them), real groups and folders, each probed as the account itself with `setpriv`; the
project is the test's own, so its group is too."""

from __future__ import annotations

import grp
import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from portal.models import AuditEvent, ClusterAccount, Membership, Project
from scheduling import engine
from scheduling.engine.storage import prepare_user, sweep_departures
from scheduling.files.folders import project_group
from scheduling.models import Quota, Task, TaskState
from tests.conftest import descriptor, in_ci, submit

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("Unix groups are made and changed only by a root worker")


@pytest.fixture
def project(areas, researcher) -> Iterator[Project]:
    """A project of alice's own, her account in its group, its folder made."""
    slug = f"keep-{uuid.uuid4().hex[:8]}"
    made = Project.objects.create(slug=slug, name="Leaving", pi=researcher)
    Membership.objects.create(project=made, user=researcher, role=Membership.Role.PI)
    for quota in Quota.objects.filter(project__slug="materials", user=None):
        quota.pk, quota.project = None, made  # the same room to submit as materials has
        quota.save()
    prepare_user(researcher.pk)
    yield made
    subprocess.run(["groupdel", project_group(slug)], check=False, capture_output=True)


def members(project: Project) -> list[str]:
    return grp.getgrnam(project_group(project.slug)).gr_mem


def reaches(account: str, folder: str) -> bool:
    """Whether the account itself, with the groups /etc/group gives it, lists the folder."""
    done = subprocess.run(
        ["setpriv", f"--reuid={account}", f"--regid={account}", "--init-groups", "ls", folder],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def test_a_member_who_leaves_loses_the_projects_folders(
    api, outsider_api, outsider, areas, project, worker
):
    folder = str(areas / "projects" / project.slug)
    assert members(project) == ["sy-alice"] and reaches("sy-alice", folder)
    assert not reaches("sy-bob", folder)
    with worker():
        added = api.post(
            f"/api/v1/projects/{project.slug}/members/", data={"username": "bob"}, format="json"
        )
    assert added.status_code == 201, added.content
    assert sorted(members(project)) == ["sy-alice", "sy-bob"]  # at once, not at a first job
    assert reaches("sy-bob", folder)
    waiting = submit(outsider_api, descriptor(project=project.slug))
    assert waiting.status_code == 201, waiting.json()

    with worker():
        removed = api.delete(f"/api/v1/projects/{project.slug}/members/bob/")
    assert removed.status_code == 204, removed.content
    assert members(project) == ["sy-alice"]
    assert not reaches("sy-bob", folder) and reaches("sy-alice", folder)
    # A task of theirs not yet started does not start with the project's folders (nor put
    # their account back in its group).
    task = Task.objects.get(pk=waiting.json()["id"])
    assert engine.task_dispatch(task.pk) == "refused"
    task.refresh_from_db()
    assert task.state == TaskState.FAILED
    assert "bob is no longer a member of project" in task.reason
    assert members(project) == ["sy-alice"]

    # Were the message lost (a broker down), the storage pass takes the account out anyway,
    # from the removal in the audit log.
    subprocess.run(["gpasswd", "-a", "sy-bob", project_group(project.slug)], check=True)
    assert AuditEvent.objects.filter(action="member.remove", project=project.slug).exists()
    assert sweep_departures() == 1
    assert members(project) == ["sy-alice"] and not reaches("sy-bob", folder)
    assert sweep_departures() == 0
    assert outsider.memberships.filter(project=project).count() == 0


def test_an_account_a_staying_member_shares_stays_in_the_group(api, areas, project, worker):
    # Carol's jobs run as alice's account (as members without a cluster account share the
    # service account): her leaving must not take it from alice. Carol is in no other
    # project, so no other project's group (shared by every test on this host) is touched.
    carol = User.objects.create_user("carol")
    ClusterAccount.objects.create(user=carol, unix_username="sy-alice")
    with worker():
        added = api.post(
            f"/api/v1/projects/{project.slug}/members/", data={"username": "carol"}, format="json"
        )
        assert added.status_code == 201, added.content
        assert api.delete(f"/api/v1/projects/{project.slug}/members/carol/").status_code == 204
    assert members(project) == ["sy-alice"]
    assert reaches("sy-alice", str(areas / "projects" / project.slug))
