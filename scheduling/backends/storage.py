"""A job's storage on the node: the folders of the site's storage areas bound into its
sandbox at the same path, the folder it starts in, and the project group it runs with
(docs/storage.md). Both backends ask here; the folders themselves were made by the engine
before the job was submitted (scheduling/engine/storage.py)."""

from __future__ import annotations

import os
import shlex

from scheduling.backends.base import SubmitRequest
from scheduling.files.folders import group_id, project_group

# What a job makes in its project's folders is its project's to read and write (the folder's
# set-group bit gives it the group); elsewhere only its own.
PROJECT_UMASK = 0o007
PRIVATE_UMASK = 0o077


def mounts(request: SubmitRequest) -> list[tuple[str, bool]]:
    """(path, read-only) of every storage folder the job mounts, parents first."""
    found = [(m.path, m.read_only) for m in request.storage.mounts]
    return sorted(found, key=lambda mount: mount[0].count("/"))


def workdir(request: SubmitRequest, default: str) -> str:
    """Where the job starts: the storage's working folder, else `default` (its own folder)."""
    return request.storage.workdir or default


def has_project_folder(request: SubmitRequest) -> bool:
    return any(m.owner == "project" for m in request.storage.mounts)


def project_groups(request: SubmitRequest) -> list[int]:
    """The supplementary groups a local job runs with: its project's, when it mounts a
    project folder and the group exists (the worker is root); none otherwise."""
    if not has_project_folder(request) or os.geteuid() != 0:
        return []
    gid = group_id(project_group(request.project))
    return [gid] if gid is not None else []


def umask(request: SubmitRequest) -> int:
    return PROJECT_UMASK if has_project_folder(request) else PRIVATE_UMASK


def script_lines(request: SubmitRequest) -> list[str]:
    """A batch script's lines, run as the job's account before its sandbox: the umask, and
    its working folder made."""
    lines = [f"umask {umask(request):03o}"]
    if request.storage.workdir:
        lines.append(f"mkdir -p -- {shlex.quote(request.storage.workdir)}")
    return lines
