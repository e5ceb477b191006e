"""Storage areas as plain values: where a project's and a user's folder is, what a job
mounts, where it works. Pure: no Django, no file system (docs/storage.md).

An area's path is a pattern: `/scratch/{project}` (a folder per project), `/home/{user}` (a
folder per user) or `/datasets` (one folder for the site). The placeholder, when there is
one, is the pattern's last component, so an area is a base folder (`/scratch`) holding one
folder per owner (`/scratch/materials`), and a path inside the area reads the same on the
host, in a job's sandbox and in the Files API (`/api/v1/files/scratch/materials/...`).
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

# Who owns the folders of an area: a project (its members' job accounts, through a group of
# the project's), a user (their job account), or the site (one folder, made by its admins).
OWNERS = ("project", "user", "site")
PLACEHOLDERS = {"project": "{project}", "user": "{user}"}
# Folder names an owner's folder may have: project slugs and POSIX user names both fit.
_OWNER_NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,62}$")
_PATTERN_RE = re.compile(r"^(/[A-Za-z0-9._-]+)+(/\{(project|user)\})?$|^/\{(project|user)\}$")
# Where a task's own working folder goes inside its project's folder (kept after it ends).
TASKS_FOLDER = "tasks"
# A project's Unix group: the prefix and its slug, or, when that is longer than groupadd takes,
# the slug's first characters and a hash of the whole slug. A short slug of that very shape
# would name another project's group, so no project may have one (`project_slug_problem`).
GROUP_PREFIX = "sy-project-"
MAX_GROUP_NAME = 32  # useradd/groupadd's limit
_HASH_DIGITS = 8
_KEPT = MAX_GROUP_NAME - len(GROUP_PREFIX) - _HASH_DIGITS - 1
_HASHED_RE = re.compile(rf"^.{{{_KEPT}}}-[0-9a-f]{{{_HASH_DIGITS}}}$", re.DOTALL)


def project_group(slug: str) -> str:
    """The Unix group of a project's job accounts; a long slug is shortened with a hash."""
    name = GROUP_PREFIX + slug
    if len(name) <= MAX_GROUP_NAME:
        return name
    digest = hashlib.sha256(slug.encode()).hexdigest()[:_HASH_DIGITS]
    return f"{name[: len(GROUP_PREFIX) + _KEPT]}-{digest}"


def project_slug_problem(slug: str) -> str | None:
    """Why no project may have this slug for its group's sake, or None: the shape a long slug's
    group name is shortened to (12 characters, a hyphen, 8 hex digits) is reserved, so no two
    projects share a group."""
    if _HASHED_RE.fullmatch(slug):
        return (
            f"must not be {_KEPT} characters, a hyphen and {_HASH_DIGITS} hex digits (the shape "
            "a longer slug's Unix group is shortened to, reserved so no two projects share one)"
        )
    return None


@dataclass(frozen=True, slots=True)
class AreaView:
    """A storage area: `path` is its pattern; `pools` the pools whose jobs mount it."""

    name: str
    path: str
    owner: str  # one of OWNERS
    read_only: bool = False
    pools: tuple[str, ...] = ()
    quota_bytes: int | None = None
    retention_days: int | None = None  # tasks' own folders, after their task ended

    @property
    def base(self) -> str:
        """The folder that holds the owners' folders (the pattern less its placeholder);
        the area's one folder when it is the site's."""
        return posixpath.dirname(self.path) if self.owner in PLACEHOLDERS else self.path

    def folder(self, owner_name: str) -> str:
        """The folder of this owner (a project slug, a user name); the site's folder for a
        site area. ValueError for a name that cannot be a folder's."""
        if self.owner not in PLACEHOLDERS:
            return self.path
        if not _OWNER_NAME_RE.fullmatch(owner_name):
            raise ValueError(f"{owner_name!r} cannot name a folder of area {self.name}")
        return posixpath.join(self.base, owner_name)


# An area's base folder must be a folder of the area's own: not the root nor a top folder of
# the system that holds what is not the area's (a project named `lib` would get /var/lib), and
# nothing inside the system's own trees (a world-writable /tmp lets anyone plant the folders).
SYSTEM_TREES = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/sys",
    "/tmp",
    "/usr",
    "/var/tmp",
    "/var/run",
    "/var/lock",
)
SYSTEM_FOLDERS = ("/", "/var", "/opt", "/srv", "/mnt", "/media", "/snap", "/lost+found")


def base_of(path: str, owner: str) -> str:
    """The base folder of an area with this (valid) pattern: see `AreaView.base`."""
    return posixpath.dirname(path) if owner in PLACEHOLDERS else path


def pattern_problem(path: str, owner: str) -> str | None:
    """Why `path` cannot be the pattern of an area whose folders `owner` owns, or None."""
    if owner not in OWNERS:
        return f"the owner must be one of {', '.join(OWNERS)}"
    if not _PATTERN_RE.fullmatch(path) or "/../" in f"{path}/" or "/./" in f"{path}/":
        return (
            "must be an absolute path of letters, digits and . _ - components, optionally "
            "ending in /{project} or /{user} (e.g. /scratch/{project}, /home/{user}, /datasets)"
        )
    wanted = PLACEHOLDERS.get(owner)
    if wanted is None and "{" in path:
        return "a site area has one folder: its path has no {project} or {user}"
    if wanted is not None and not path.endswith(wanted):
        return f"the folders of a {owner} area are named by {wanted}: end the path with it"
    base = base_of(path, owner)
    if base in SYSTEM_FOLDERS or within(base, SYSTEM_TREES):
        return (
            f"its folders must lie in a folder of the area's own, not in {base} (a system "
            "folder: an owner named like what is there would get it); e.g. /scratch/{project}"
        )
    return None


def overlap_problem(path: str, owner: str, others: Iterable[tuple[str, str, str]]) -> str | None:
    """Why an area with this (valid) pattern cannot be beside `others` ((name, path, owner) of
    each other area), or None: no two areas' base folders may be the same or one inside the
    other, or a user named like a project (or a folder of another area) would get its folder."""
    base = base_of(path, owner)
    for name, other_path, other_owner in sorted(others):
        other = base_of(other_path, other_owner)
        if within(base, [other]) or within(other, [base]):
            return (
                f"its folders ({base}) must not be those of area {name} ({other}) nor lie "
                "inside or around them: give each area a base folder of its own"
            )
    return None


def retention_problem(owner: str, retention_days: int | None) -> str | None:
    """Why an area of this owner cannot keep tasks' folders this many days, or None: only a
    project area holds tasks' own folders, and a day is the least (a task's outputs must be
    there to download once it ended)."""
    if retention_days is None:
        return None
    if owner != "project":
        return "only a project area holds tasks' own folders: leave it empty"
    if retention_days < 1:
        return "at least 1 day (empty: kept forever)"
    return None


def task_folder_ids(names: Iterable[str]) -> list[int]:
    """The names in a project folder's `tasks/` that are task ids (a folder per task); any
    other name is someone's own and never a task's."""
    return sorted(int(n) for n in names if n.isascii() and n.isdigit() and n == str(int(n)))


def expired_task_folders(
    ended: Mapping[int, datetime | None], *, now: datetime, retention_days: int | None
) -> list[int]:
    """Of the ended tasks whose folders are there (task id → when it ended), those whose
    folders are past the area's retention: ended more than `retention_days` ago. A task that
    has not ended (None) is never one; nor is any when the area keeps them forever."""
    if retention_days is None:
        return []
    cutoff = now - timedelta(days=retention_days)
    return sorted(t for t, at in ended.items() if at is not None and at < cutoff)


def owner_name(area: AreaView, *, project: str, user: str) -> str:
    """The name of a job's own folder in this area: its project's, its user's, or "" (the
    site's one folder)."""
    return {"project": project, "user": user}.get(area.owner, "")


@dataclass(frozen=True, slots=True)
class Mount:
    """A folder bound into a job's sandbox at the same path."""

    path: str
    read_only: bool
    owner: str  # the area's owner kind: who the folder is made for (docs/storage.md)


@dataclass(frozen=True, slots=True)
class JobStorage:
    """What a job mounts of the site's storage, and the folder it starts in ("" when its pool
    mounts no project area and the descriptor named none)."""

    mounts: tuple[Mount, ...] = ()
    workdir: str = ""


def pool_areas(areas: Iterable[AreaView], pool: str) -> list[AreaView]:
    return sorted((a for a in areas if pool in a.pools), key=lambda a: a.name)


def job_mounts(areas: Iterable[AreaView], *, pool: str, project: str, user: str) -> list[Mount]:
    """The folders a job of `pool` mounts: of each area its pool mounts, its project's or its
    user's own folder (never the area's base: other projects' folders are not in its
    sandbox), or the site's folder."""
    return [
        Mount(area.folder(owner_name(area, project=project, user=user)), area.read_only, area.owner)
        for area in pool_areas(areas, pool)
    ]


def project_folder(areas: Iterable[AreaView], *, pool: str, project: str) -> str:
    """The project's folder in the first project area its pool mounts read-write (by name),
    where its tasks work and its workflows' steps share data; "" when the pool mounts none."""
    for area in pool_areas(areas, pool):
        if area.owner == "project" and not area.read_only:
            return area.folder(project)
    return ""


def default_workdir(areas: Iterable[AreaView], *, pool: str, project: str, task_id: int) -> str:
    """A task's own folder in its project folder: `<project folder>/tasks/<task id>`; ""
    when the pool mounts no project area."""
    folder = project_folder(areas, pool=pool, project=project)
    return posixpath.join(folder, TASKS_FOLDER, str(task_id)) if folder else ""


def in_project_folder(path: str, folder: str) -> str | None:
    """A descriptor's path made absolute: a relative one (`flows/run-1/READY`) names a place
    in the project `folder`, so a workflow's steps name the same place on any site. None for
    a relative path when there is no project folder."""
    if path.startswith("/"):
        return path
    return posixpath.join(folder, path) if folder else None


def workdir_problem(
    areas: Iterable[AreaView], workdir: str, *, pool: str, project: str, user: str
) -> str | None:
    """Why a job of `pool` (of this project and user) cannot work in `workdir`, or None: it
    must be inside a folder the job mounts read-write."""
    areas = list(areas)
    mounts = job_mounts(areas, pool=pool, project=project, user=user)
    writable = [m.path for m in mounts if not m.read_only]
    folder = project_folder(areas, pool=pool, project=project)
    tasks = posixpath.join(folder, TASKS_FOLDER) if folder else ""
    if tasks and within(workdir, [tasks]):
        # Each task's own folder is made fresh there by its job: a workdir inside it would
        # let a member prepare another's next folder (code its job would run).
        return f"must not be inside {tasks}, which holds tasks' own folders"
    if within(workdir, writable):
        return None
    where = ", ".join(writable) or "none: this queue's pool mounts no writable storage area"
    return f"must be inside a folder the job mounts read-write ({where})"


def input_mount(
    areas: Iterable[AreaView], path: str, *, pool: str, project: str, user: str
) -> tuple[AreaView, str] | None:
    """The area and the folder of it, mounted by a job of `pool`, that holds the input
    `path` (read-only ones too: an input is only read); None when no mounted folder does."""
    for area in pool_areas(areas, pool):
        try:
            folder = area.folder(owner_name(area, project=project, user=user))
        except ValueError:
            continue  # a user name that cannot be a folder's: no folder of theirs
        if within(path, [folder]):
            return area, folder
    return None


def input_problem(
    areas: Iterable[AreaView], path: str, *, pool: str, project: str, user: str
) -> str | None:
    """Why a job of `pool` cannot be given the input `path`, or None: it must be inside a
    folder the job mounts."""
    if input_mount(areas, path, pool=pool, project=project, user=user) is not None:
        return None
    mounts = job_mounts(areas, pool=pool, project=project, user=user)
    where = ", ".join(m.path for m in mounts) or "none: this queue's pool mounts no storage area"
    return f"must be inside a folder the job mounts ({where})"


def within(path: str, folders: Iterable[str]) -> bool:
    """Whether the absolute, normalised `path` is one of `folders` or below one."""
    if not path.startswith("/") or posixpath.normpath(path) != path.rstrip("/") or "\0" in path:
        return False
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def job_storage(
    areas: Iterable[AreaView],
    *,
    pool: str,
    project: str,
    user: str,
    task_id: int,
    workdir: str | None,
) -> JobStorage:
    """The mounts and working folder of one task's job (the descriptor's `workdir`, checked
    at submission, else its own folder in its project area)."""
    areas = list(areas)
    mounts = job_mounts(areas, pool=pool, project=project, user=user)
    chosen = workdir or default_workdir(areas, pool=pool, project=project, task_id=task_id)
    return JobStorage(mounts=tuple(mounts), workdir=chosen)
