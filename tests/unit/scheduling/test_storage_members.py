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
from scheduling.engine.storage import prepare_folders, prepare_user, reconcile_groups
from scheduling.files.folders import project_group
from scheduling.models import Quota, Task, TaskState
from scheduling.selectors.storage import storage_areas
from scheduling.tasks import storage_housekeeping
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

    # Were the message lost (a broker down), the storage pass takes the account out anyway:
    # no current member's jobs run as it.
    subprocess.run(["gpasswd", "-a", "sy-bob", project_group(project.slug)], check=True)
    assert AuditEvent.objects.filter(action="member.remove", project=project.slug).exists()
    assert reconcile_groups([project.slug]) == 1
    assert members(project) == ["sy-alice"] and not reaches("sy-bob", folder)
    assert reconcile_groups([project.slug]) == 0
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


def join(project: Project, user: User) -> None:
    """The user a member, their account in the group (as the members page does)."""
    Membership.objects.create(project=project, user=user)
    prepare_user(user.pk)


@pytest.mark.parametrize("how", ["admin console", "user deleted", "account renamed"])
def test_the_storage_pass_takes_out_an_account_no_member_runs_as(areas, project, how, caplog):
    # Each way a member's account goes with no message to the worker: the old admin
    # console's inline deleted the row; deleting a user cascades; a renamed cluster account
    # leaves the old one in the group. None leaves a row in the audit log. Dave (a user of
    # this test's own, whose jobs run as sy-bob) is in no other project.
    dave = User.objects.create_user("dave")
    ClusterAccount.objects.create(user=dave, unix_username="sy-bob")
    folder = str(areas / "projects" / project.slug)
    join(project, dave)
    assert sorted(members(project)) == ["sy-alice", "sy-bob"] and reaches("sy-bob", folder)
    if how == "admin console":
        Membership.objects.filter(project=project, user=dave).delete()
    elif how == "user deleted":
        dave.delete()
    else:
        ClusterAccount.objects.filter(user=dave).update(unix_username="sy-nobody-here")
    assert not AuditEvent.objects.filter(action="member.remove", project=project.slug).exists()
    with caplog.at_level("WARNING", logger="scheduling.engine.storage"):
        assert reconcile_groups([project.slug]) == 1
    assert f"took sy-bob out of the group of project {project.slug}" in caplog.text
    assert members(project) == ["sy-alice"]
    assert not reaches("sy-bob", folder) and reaches("sy-alice", folder)


def test_the_storage_pass_keeps_an_account_a_current_member_shares(areas, project):
    # Carol runs as alice's account and leaves through the admin console: alice stays, so
    # the account does.
    carol = User.objects.create_user("carol")
    ClusterAccount.objects.create(user=carol, unix_username="sy-alice")
    join(project, carol)
    Membership.objects.filter(project=project, user=carol).delete()
    assert reconcile_groups([project.slug]) == 0
    assert members(project) == ["sy-alice"]


@pytest.mark.unix_groups
def test_the_housekeeping_pass_reconciles_the_groups(areas, project, outsider):
    join(project, outsider)
    Membership.objects.filter(project=project, user=outsider).delete()
    assert storage_housekeeping.apply().get()["groups_left"] >= 1
    assert members(project) == ["sy-alice"]


def test_a_member_removed_after_the_projects_were_listed_is_not_put_back(areas, project):
    # A Files visit's worker listed bob's projects, then he was removed (and left the group)
    # before it reached this project: the add asks again and leaves him out.
    bob = User.objects.get(username="bob")
    assert not Membership.objects.filter(project=project, user=bob).exists()
    prepare_folders(
        [a for a in storage_areas() if a.owner == "project"],
        project=project.slug,
        username="bob",
        account="sy-bob",
    )
    assert members(project) == ["sy-alice"]
    assert not reaches("sy-bob", str(areas / "projects" / project.slug))
