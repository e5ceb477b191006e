"""Reads of the site's storage: its areas as decision values, the folders a user may open in
Files (their projects', their own, the site's), and what is in them (docs/storage.md).

A folder outside the user's memberships does not exist for them (a 404): another project's
folder, another user's. Every read is done by the file helper as the folder's job account
(scheduling/files/fileops.py), never by the web process itself.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404

from portal.errors import ApplicationError
from portal.models import ClusterAccount, Membership
from scheduling.decisions.storage import AreaView, default_workdir
from scheduling.files import fileops
from scheduling.files.folders import account_ids, group_id, project_group
from scheduling.models import StorageArea, Task

# A FileOpError's code → the HTTP status the API answers with.
STATUS = {
    fileops.NOT_FOUND: 404,
    fileops.EXISTS: 409,
    fileops.NOT_EMPTY: 409,
    fileops.DENIED: 403,
    fileops.NOT_A_FOLDER: 404,
    fileops.IS_A_FOLDER: 409,
    fileops.LINK: 400,
    fileops.INVALID: 400,
}
_MESSAGES = {
    fileops.NOT_FOUND: "no such file or folder",
    fileops.LINK: "is a symbolic link (or goes through one): Files does not follow links",
}


def storage_areas() -> list[AreaView]:
    """Every storage area, with the names of the pools that mount it."""
    areas = StorageArea.objects.prefetch_related("pools")
    return [area.as_view(tuple(sorted(p.name for p in area.pools.all()))) for area in areas]


@dataclass(frozen=True, slots=True)
class Folder:
    """An owner's folder of an area as a user opens it in Files."""

    area: AreaView
    owner: str  # the project's slug, the user's name, or "" (the site's one folder)
    path: str  # on the host (and in jobs)
    writable: bool  # through Files: a project's or the user's own; the site's is read-only

    @property
    def url_path(self) -> str:
        """Its path in the Files URLs: `<area>/<owner>` (or `<area>` for the site's)."""
        return f"{self.area.name}/{self.owner}" if self.owner else self.area.name


def job_account_name(user: User) -> str:
    """The Unix account the user's jobs run as: their cluster account, else the job account."""
    try:
        return user.cluster_account.unix_username
    except ClusterAccount.DoesNotExist:
        return settings.SWITCHYARD_JOB_ACCOUNT


def folders_for_user(user: User) -> list[Folder]:
    """The folders the user may open: each project area's folder of each of their projects,
    each user area's folder of their own, each site area."""
    projects = sorted(
        Membership.objects.filter(user_id=user.pk).values_list("project__slug", flat=True)
    )
    found = []
    for area in storage_areas():
        owners = {"project": projects, "user": [user.get_username()]}.get(area.owner, [""])
        for owner in owners:
            try:
                path = area.folder(owner)
            except ValueError:
                continue  # a user name that cannot be a folder's: no folder of theirs
            found.append(Folder(area, owner, path, writable=area.owner != "site"))
    return found


def area_folders(user: User, area: str) -> list[Folder]:
    """The user's folders of one area (a 404 when they have none there)."""
    found = [f for f in folders_for_user(user) if f.area.name == area]
    if not found:
        raise Http404("no such area")
    return found


def folder_get_for_user(user: User, area: str, path: str) -> tuple[Folder, str]:
    """The folder a Files path names (`<owner>/<rest>`, or `<rest>` in a site area), and the
    rest: a 404 for an area or folder outside the user's memberships."""
    if "\0" in path:
        raise ApplicationError("a path must not contain a NUL character", field="path", got=None)
    for folder in folders_for_user(user):
        if folder.area.name != area:
            continue
        if not folder.owner:
            return folder, path
        head, _, rest = path.partition("/")
        if head == folder.owner:
            return folder, rest
    raise Http404("no such folder")


def file_account(user: User, folder: Folder) -> tuple[int, int, tuple[int, ...]] | None:
    """Who the file helper runs as for this user and folder: the user's job account, with the
    project's group for a project's folder. None when the portal is not root: it then works
    as itself (and so do its jobs)."""
    if os.geteuid() != 0:
        return None
    name = job_account_name(user)
    ids = account_ids(name)
    if ids is None or 0 in ids:
        raise ApplicationError(
            f"no Unix account {name!r} to open your files as (never root)", status=503
        )
    groups: tuple[int, ...] = ()
    if folder.area.owner == "project":
        gid = group_id(project_group(folder.owner))
        groups = (gid,) if gid is not None else ()
    return ids[0], ids[1], groups


def folder_umask(folder: Folder) -> int:
    """A project's files are its members' to read and write; a user's are their own."""
    return 0o007 if folder.area.owner == "project" else 0o077


def as_account(user: User, folder: Folder, op: str, *args: object) -> tuple[dict, int | None]:
    """Run a file operation in `folder` as the user's job account; ApplicationError (with the
    API's status) when it is refused."""
    account = file_account(user, folder)
    try:
        return fileops.run(
            account,
            op,
            folder.path,
            *args,
            umask=folder_umask(folder),
            python=settings.SWITCHYARD_FILES_HELPER_PYTHON,
        )
    except fileops.FileOpError as exc:
        raise ApplicationError(
            _MESSAGES.get(exc.code, str(exc)), field="path", got=None, status=STATUS[exc.code]
        ) from None


def folder_entries(user: User, folder: Folder, path: str) -> list[dict]:
    """What the folder `path` holds: name, type (file, folder, link, other), size, mtime."""
    return as_account(user, folder, "list", path)[0]["entries"]


def folder_listing(user: User, folder: Folder, path: str) -> dict:
    """`entries` as folder_entries gives them, at most the first fileops.MAX_LISTED names the
    folder yields (sorted), `truncated`: whether it holds more than those, and `limit`."""
    answer = as_account(user, folder, "list", path)[0]
    truncated = bool(answer.get("truncated"))
    return {"entries": answer["entries"], "truncated": truncated, "limit": fileops.MAX_LISTED}


def file_info(user: User, folder: Folder, path: str) -> dict:
    """The entry of `path` itself (type "folder" for the owner's folder)."""
    return as_account(user, folder, "stat", path)[0]


def file_open(user: User, folder: Folder, path: str) -> tuple[int, int]:
    """An open descriptor of the regular file `path`, and its size (the caller closes it)."""
    answer, fd = as_account(user, folder, "read", path)
    if fd is None:
        raise ApplicationError("the file could not be opened", field="path", status=500)
    return fd, int(answer["size"])


def input_type(user: User, area: AreaView, folder: str, path: str) -> str:
    """What the input `path` (inside `folder`, the owner's folder of `area` a job mounts) is,
    looked at as the user's job account the way Files looks (no link followed on the way):
    "file", "folder", "link" or "other"; ApplicationError when it cannot be (missing, a
    link on the way, not the account's to read)."""
    owner = posixpath.basename(folder) if area.owner in ("project", "user") else ""
    found = Folder(area, owner, folder, writable=area.owner != "site")
    return str(file_info(user, found, path[len(folder) :].strip("/"))["type"])


def task_workdir(task: Task) -> str:
    """Where the task's jobs work: its descriptor's `workdir`, else its own folder in its
    project's area ("" when its pool mounts none)."""
    named = task.spec.get("workdir") if isinstance(task.spec, dict) else None
    return named or default_workdir(
        storage_areas(), pool=task.queue.pool.name, project=task.project.slug, task_id=task.pk
    )


def task_workdir_folder(user: User, workdir: str) -> tuple[Folder, str] | None:
    """The Files folder and path of a task's working folder, when the user may open it."""
    for folder in folders_for_user(user):
        if workdir == folder.path or workdir.startswith(folder.path + "/"):
            return folder, workdir[len(folder.path) :].lstrip("/")
    return None
