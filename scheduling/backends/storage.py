"""A job's storage on the node: the folders of the site's storage areas bound into its
sandbox at the same path, the folder it starts in, and the project group it runs with
(docs/storage.md). Both backends ask here; the folders themselves were made by the engine
before the job was submitted (scheduling/engine/storage.py)."""

from __future__ import annotations

import os
import posixpath
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


# A job's exit status when one of its inputs could not be linked (sysexits' EX_NOINPUT); the
# reason, naming the input, is in the file INPUT_REASON of its job folder.
INPUT_EXIT = 66
INPUT_REASON = "input-reason"


def input_links(request: SubmitRequest, default: str) -> list[tuple[str, str]]:
    """(input, the link to it in the working folder) of each of the job's inputs: an input is
    linked under its own name (the descriptor refuses two with one name)."""
    folder = workdir(request, default)
    return [
        (path, posixpath.join(folder, posixpath.basename(path))) for path in request.spec.inputs
    ]


def missing_input(path: str) -> str:
    return (
        f"input {path} is missing, or the job's account cannot reach it: the command did not start"
    )


def taken_link(path: str, link: str) -> str:
    return (
        f"input {path} cannot be linked as {link}: something else has that name in the "
        "working folder and is left alone; rename or remove it, or the input"
    )


def script_lines(request: SubmitRequest, default: str) -> list[str]:
    """A batch script's lines, run as the job's account before its sandbox: the umask, its
    working folder made, and its inputs linked into it (`default` is its own folder, where
    it works when the storage names none, and where a failure's reason is written)."""
    lines = [f"umask {umask(request):03o}"]
    if request.storage.workdir:
        lines.append(f"mkdir -p -- {shlex.quote(request.storage.workdir)}")
    reason = shlex.quote(posixpath.join(default, INPUT_REASON))
    for path, link in input_links(request, default):
        p, ln = shlex.quote(path), shlex.quote(link)
        missing = shlex.quote(missing_input(path))
        taken = shlex.quote(taken_link(path, link))
        fail = 'echo "$m" >&2; printf %s "$m" > {reason}; exit {code}; }}'
        fail = fail.format(reason=reason, code=INPUT_EXIT)
        # -T: a folder of that name is refused, not linked into. A link to the input left by
        # an earlier attempt in a kept folder is the same link.
        lines.append(f"test -e {p} || {{ m={missing}; {fail}")
        lines.append(
            f'ln -sT -- {p} {ln} 2>/dev/null || [ "$(readlink -- {ln})" = {p} ] || '
            f"{{ m={taken}; {fail}"
        )
    return lines
