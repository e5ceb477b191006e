"""Where a storage folder is on the Files page: its URL, and a task's working folder's."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.urls import reverse

from scheduling.selectors.storage import Folder, task_workdir, task_workdir_folder


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
