"""Where a storage folder is on the Files page: its URL, a task's working folder's, and the
submit form's picker of a working folder and of inputs (docs/storage.md)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import Http404
from django.urls import reverse

from portal.errors import ApplicationError
from scheduling.selectors.storage import (
    Folder,
    file_info,
    folder_entries,
    folder_get_for_user,
    folders_for_user,
    task_workdir,
    task_workdir_folder,
)


def files_url(folder: Folder, rest: str = "") -> str:
    """The page of `rest` in `folder`."""
    owner_and_rest = "/".join(part for part in (folder.owner, rest.strip("/")) if part)
    if not owner_and_rest:
        return reverse("files-area", args=[folder.area.name])
    return reverse("files-path", args=[folder.area.name, owner_and_rest])


def task_workdir_link(user: User, task: Any) -> tuple[str, str] | None:
    """The task's working folder and its Files page, when the user may open it there."""
    workdir = task_workdir(task)
    found = task_workdir_folder(user, workdir) if workdir else None
    return (workdir, files_url(*found)) if found else None


def _job_folders(user: User) -> list[Folder]:
    """The folders a job of the user's may work in: a project's or their own, in an area that
    jobs mount read-write."""
    return [f for f in folders_for_user(user) if f.writable and not f.area.read_only]


def _picked(user: User, at: str) -> tuple[Folder, str]:
    """The folder and rest of the Files path `at`: a 404 when it is not a folder the user's
    jobs may work in."""
    area, _, path = at.strip("/").partition("/")
    folder, rest = folder_get_for_user(user, area, path)
    if folder not in _job_folders(user):
        raise Http404("not a folder jobs may work in")
    return folder, rest.strip("/")


def folder_picker(user: User, at: str) -> dict[str, Any]:
    """The submit form's folder picker at the Files path `at` ("" for the user's folders): the
    folders in it, each with its Files path and page; the way back; whether it may be used."""
    if not at.strip("/"):
        rows = [(f.url_path, f.url_path, files_url(f), True) for f in _job_folders(user)]
        return {"at": "", "crumbs": [], "rows": rows, "usable": False}
    folder, rest = _picked(user, at)
    entries = folder_entries(user, folder, rest)
    here = "/".join(part for part in (folder.url_path, rest) if part)
    # Folders to open (and use), then files to add as inputs; links and the rest are not
    # offered (neither would be followed).
    rows = [
        (
            e["name"],
            f"{here}/{e['name']}",
            files_url(folder, f"{rest}/{e['name']}".lstrip("/")),
            e["type"] == "folder",
        )
        for kind in ("folder", "file")
        for e in entries
        if e["type"] == kind
    ]
    crumbs, walked = [(folder.url_path, folder.url_path)], folder.url_path
    for part in [p for p in rest.split("/") if p]:
        walked = f"{walked}/{part}"
        crumbs.append((part, walked))
    return {"at": here, "crumbs": crumbs, "rows": rows, "usable": True}


def picked_workdir(user: User, at: str) -> str:
    """The path a job sees for the Files path `at`: a folder there (no link on the way) that
    the user's jobs may work in."""
    folder, rest = _picked(user, at)
    if file_info(user, folder, rest)["type"] != "folder":
        raise ApplicationError("is not a folder", field="workdir", got=at[:200])
    return "/".join(part for part in (folder.path, rest) if part)


def picked_input(user: User, at: str) -> str:
    """The path a job sees for the Files path `at`: a file or a folder there (no link on the
    way or at the end), to add to the descriptor's `inputs`."""
    folder, rest = _picked(user, at)
    if file_info(user, folder, rest)["type"] not in ("file", "folder"):
        raise ApplicationError("is not a file or a folder", field="inputs", got=at[:200])
    return "/".join(part for part in (folder.path, rest) if part)


def with_input(text: str, path: str) -> str:
    """The Inputs box's text (one path per line) with `path` added once, at the end."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "\n".join(lines if path in lines else [*lines, path])
