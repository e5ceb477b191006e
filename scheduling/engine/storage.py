"""A job's storage, made on the worker's side before it is submitted: its project's Unix
group, the owners' folders of its pool's areas, and its working folder (docs/storage.md).

Tasks' own working folders past their area's retention are removed here too
(`expire_task_folders`, a periodic pass), a member who left a project leaves its group
(`member_left`), and the same periodic pass takes out of each project's group every account
no current member's jobs run as (`reconcile_groups`): whatever way the member went (removed
in the admin console, their user deleted, their cluster account renamed, a message lost).

The owners' folders are made as root (scheduling/files/folders.py); the working folder, which
lies inside a folder users write, is made by the job's own account as it starts (a link
planted on the way leads it nowhere the account could not go anyway). The same pass runs for
a user opening Files before any job of theirs ran (`prepare_user`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from datetime import datetime

from django.contrib.auth.models import User
from django.utils import timezone

from portal.models import Membership, Project
from scheduling.decisions.storage import (
    TASKS_FOLDER,
    AreaView,
    JobStorage,
    expired_task_folders,
    job_storage,
    task_folder_ids,
)
from scheduling.files.folders import (
    PROJECT_MODE,
    SITE_MODE,
    USER_MODE,
    account_ids,
    ensure_folder,
    ensure_project_group,
    leave_project_group,
    project_group_members,
    remove_folder,
    tasks_folder,
)
from scheduling.models import TERMINAL_STATES, AttemptState, Task
from scheduling.selectors.storage import job_account_name, storage_areas

log = logging.getLogger(__name__)


class StorageError(Exception):
    """The job's folders could not be made: it is not submitted (the reason says why)."""


def prepare_folders(
    areas: list[AreaView], *, project: str | None, username: str, account: str
) -> None:
    """The owners' folders of these areas for this project and user (made if missing), and
    the user's job account in the project's group: each member's account joins it with
    their first job or visit to Files."""
    ids = account_ids(account)
    for area in areas:
        if area.owner == "project" and project is not None:
            # Asked again right before the account is added: a member removed since the
            # caller listed the projects is not put back in the group.
            gid = ensure_project_group(
                project, [account], admit=lambda acct: acct in member_accounts(project)
            )
            ensure_folder(area.base, project, uid=0, gid=gid, mode=PROJECT_MODE)
        elif area.owner == "user":
            uid, gid = ids if ids else (None, None)
            ensure_folder(area.base, username, uid=uid, gid=gid, mode=USER_MODE)
        elif area.owner == "site":
            ensure_folder(area.path, "", uid=None, gid=None, mode=SITE_MODE)


# (project, user, the areas' paths) → when its folders were last made: a dispatch of many
# tasks of one project makes them once, not once a task.
_PREPARED: dict[tuple[str, ...], float] = {}
PREPARED_TTL_S = 60.0


def prepare_job(task: Task, *, pool: str, areas: tuple[AreaView, ...]) -> JobStorage:
    """The storage of the task's next job, the owners' folders made; StorageError when they
    cannot be (a folder that is not one, a refused group). The working folder is made by the
    job's own account as the job starts (the backends do it), since it lies inside a folder
    users write."""
    mounted = [a for a in areas if pool in a.pools]
    if not mounted:
        return JobStorage()
    username = task.owner.get_username()
    try:
        storage = job_storage(
            mounted,
            pool=pool,
            project=task.project.slug,
            user=username,
            task_id=task.pk,
            workdir=task.spec.get("workdir") if isinstance(task.spec, dict) else None,
        )
        account = job_account_name(task.owner)
        key = (task.project.slug, username, account, *(a.path for a in mounted))
        fresh = time.monotonic() - _PREPARED.get(key, -PREPARED_TTL_S) < PREPARED_TTL_S
        if not (fresh and _still_prepared(storage, mounted, task.project.slug, account)):
            # Checked with the folders, once a minute: a member who left is never put back
            # in the project's group, and their tasks not yet started do not start with it.
            if any(a.owner == "project" for a in mounted) and not _is_member(task):
                raise StorageError(
                    f"{username} is no longer a member of project {task.project.slug}: "
                    "their jobs do not get its folders"
                )
            prepare_folders(mounted, project=task.project.slug, username=username, account=account)
            _PREPARED[key] = time.monotonic()
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        raise StorageError(f"the job's storage folders could not be made: {exc}") from exc
    return storage


def _still_prepared(
    storage: JobStorage, mounted: list[AreaView], project: str, account: str
) -> bool:
    """What a recent preparation made is still there: a folder removed meanwhile (by an
    admin) is made again, and the account, taken out of the project's group meanwhile, is
    put back (the task's owner is still a member: the caller checks that first)."""
    if not all(os.path.isdir(m.path) for m in storage.mounts):
        return False
    if os.geteuid() != 0 or account_ids(account) is None:
        return True
    if not any(a.owner == "project" for a in mounted):
        return True
    return account in (project_group_members(project) or [])


def _is_member(task: Task) -> bool:
    return Membership.objects.filter(project_id=task.project_id, user_id=task.owner_id).exists()


def prepare_user(user_id: int) -> int:
    """Every folder the user may open in Files, made if missing (a user who opens Files
    before any job of theirs ran); how many areas were looked at."""
    user = User.objects.select_related("cluster_account").filter(pk=user_id).first()
    if user is None:
        return 0
    areas = storage_areas()
    account = job_account_name(user)
    projects = Membership.objects.filter(user=user).values_list("project__slug", flat=True)
    try:
        prepare_folders(
            [a for a in areas if a.owner != "project"],
            project=None,
            username=user.get_username(),
            account=account,
        )
        for project in projects:
            prepare_folders(
                [a for a in areas if a.owner == "project"],
                project=project,
                username=user.get_username(),
                account=account,
            )
    except (OSError, ValueError, subprocess.CalledProcessError) as exc:
        log.warning("the storage folders of %s could not be made: %s", user, exc)
    return len(areas)


def member_left(project: str, user_id: int) -> bool:
    """A member left `project`: their job account leaves the project's group, so it reaches
    the project's folders no more (outside jobs, and in the Slurm jobs that get their groups
    from it). Not when they are a member again, nor when a member who stays runs their jobs as
    the same account (the shared service account). Whether it left."""
    user = User.objects.select_related("cluster_account").filter(pk=user_id).first()
    members = list(
        Membership.objects.filter(project__slug=project).select_related("user__cluster_account")
    )
    if user is None or any(m.user_id == user_id for m in members):
        return False
    account = job_account_name(user)
    if account in {job_account_name(m.user) for m in members}:
        return False
    for key in [k for k in _PREPARED if k[0] == project and k[2] == account]:
        del _PREPARED[key]  # their next job here must not find the group "already made"
    try:
        return leave_project_group(project, account)
    except (OSError, subprocess.CalledProcessError) as exc:
        log.warning("%s could not leave the group of project %s: %s", account, project, exc)
        return False


def member_accounts(project: str) -> set[str]:
    """The job accounts of the project's current members (a shared account once)."""
    members = Membership.objects.filter(project__slug=project).select_related(
        "user__cluster_account"
    )
    return {job_account_name(m.user) for m in members}


def reconcile_groups(projects: list[str] | None = None) -> int:
    """Take out of each project's Unix group every account that is the job account of none
    of its current members; how many were taken out. An account a member who stays still
    runs as (the shared service account) stays. Each removal is logged.

    This is what keeps a group right whatever way a member went: removed through the API
    or page (whose message may have been lost), in the admin console, with their user
    deleted, or with their cluster account's username changed (the old account goes). It
    also undoes an add that raced a removal. `projects`: only these slugs (all by default)."""
    if os.geteuid() != 0:
        return 0  # a worker that is not root made no groups
    slugs = (
        projects if projects is not None else list(Project.objects.values_list("slug", flat=True))
    )
    removed = 0
    for slug in sorted(slugs):
        present = project_group_members(slug)
        if not present:
            continue
        for account in sorted(set(present) - member_accounts(slug)):
            for key in [k for k in _PREPARED if k[0] == slug and k[2] == account]:
                del _PREPARED[key]
            try:
                if leave_project_group(slug, account):
                    removed += 1
                    log.warning(
                        "took %s out of the group of project %s: no current member's jobs run "
                        "as it",
                        account,
                        slug,
                    )
            except (OSError, subprocess.CalledProcessError) as exc:
                log.warning("%s could not leave the group of project %s: %s", account, slug, exc)
    return removed


IDS_A_QUERY = 500


def expire_task_folders(*, now: datetime | None = None) -> int:
    """Remove the tasks' own working folders (`<project folder>/tasks/<task id>`) whose task
    ended more than its area's `retention_days` ago; how many were removed.

    Only a folder named by the id of one of the project's own tasks that has ended, with no
    attempt of it still queued or running, is ever removed; anything else in `tasks/` is left
    as it is. Nothing is followed through a link: not a `tasks` that is one, not a task's
    folder that is one, not one inside (docs/storage.md)."""
    now = now or timezone.now()
    areas = [a for a in storage_areas() if a.owner == "project" and a.retention_days]
    if not areas:
        return 0
    projects = list(Project.objects.order_by("slug").values_list("pk", "slug"))
    removed = 0
    for area in areas:
        for project_id, slug in projects:
            try:
                area.folder(slug)
                removed += _expire_in(area, slug, project_id, now=now)
            except (OSError, ValueError) as exc:
                log.warning("tasks' folders of %s in area %s: %s", slug, area.name, exc)
    return removed


def _expire_in(area: AreaView, slug: str, project_id: int, *, now: datetime) -> int:
    removed = 0
    with tasks_folder(area.base, slug, TASKS_FOLDER) as fd:
        if fd is None:
            return 0
        ids = task_folder_ids(os.listdir(fd))
        for at in range(0, len(ids), IDS_A_QUERY):
            ended = dict(
                Task.objects.filter(
                    project_id=project_id,
                    pk__in=ids[at : at + IDS_A_QUERY],
                    state__in=TERMINAL_STATES,
                )
                .exclude(attempt_set__state__in=(AttemptState.QUEUED, AttemptState.RUNNING))
                .values_list("pk", "ended_at")
            )
            expired = expired_task_folders(ended, now=now, retention_days=area.retention_days)
            for task_id in expired:
                if remove_folder(fd, str(task_id)):
                    removed += 1
                    log.info(
                        "removed the working folder of task %s (%s/%s/%s, kept %s days)",
                        task_id,
                        area.folder(slug),
                        TASKS_FOLDER,
                        task_id,
                        area.retention_days,
                    )
    return removed
