"""A job's storage on the node: the folders of the site's storage areas bound into its
sandbox at the same path, the folder it starts in, and the project group it runs with
(docs/storage.md). Both backends ask here; the folders themselves were made by the engine
before the job was submitted (scheduling/engine/storage.py)."""

from __future__ import annotations

import json
import os
import posixpath
import shlex

from scheduling.backends.base import SubmitRequest
from scheduling.decisions.storage import TASKS_FOLDER, within
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


# A job's exit status when its working folder could not be made or one of its inputs could
# not be linked (sysexits' EX_NOINPUT); the reason, naming the folder or the input, is in the
# file INPUT_REASON of its job folder.
INPUT_EXIT = 66
INPUT_REASON = "input-reason"
UNCHECKED = "the working folder and inputs could not be checked: no python3 on this node"


def is_prelude_reason(text: str) -> bool:
    """Whether `text` has the form of a reason the lines before a job's sandbox give (below):
    the job's account writes that file, so only these forms are shown as the job's reason."""
    starts = ("input /", "the working folder /", "the task's own folder /", UNCHECKED)
    return "\n" not in text and text.startswith(starts)


def input_links(request: SubmitRequest, default: str) -> list[tuple[str, str]]:
    """(input, the link to it in the working folder) of each of the job's inputs: an input is
    linked under its own name (the descriptor refuses two with one name)."""
    folder = workdir(request, default)
    return [
        (path, posixpath.join(folder, posixpath.basename(path))) for path in request.spec.inputs
    ]


def missing_input(path: str) -> str:
    # Nothing beyond the user's own path: not whether something is where a link leads.
    return (
        f"input {path} is missing or reached through a link (links on its way are not "
        "followed): the command did not start"
    )


def taken_link(path: str, link: str) -> str:
    return (
        f"input {path} cannot be linked as {link}: something else has that name in the "
        "working folder and is left alone; rename or remove it, or the input"
    )


def workdir_refused(path: str) -> str:
    return (
        f"the working folder {path} could not be made: something on its way is not a folder, "
        "is a symbolic link (links are not followed) or is closed to the job's account: the "
        "command did not start"
    )


def workdir_taken(path: str) -> str:
    return (
        f"the task's own folder {path} was there before the task ran and is not its "
        "account's: it is left alone and nothing in it is run; the command did not start"
    )


def _base(path: str, request: SubmitRequest) -> str:
    """The mounted folder `path` lies in (the deepest), where a walk to it starts; "" when
    none does."""
    below = [m.path for m in request.storage.mounts if within(path, [m.path])]
    return max(below, key=len) if below else ""


def own_folder(request: SubmitRequest) -> bool:
    """Whether the working folder is the task's own, `<project folder>/tasks/<id>` (a
    descriptor's workdir is never inside tasks/: refused at submission)."""
    path = request.storage.workdir
    parent, name = posixpath.split(path)
    return name.isdigit() and any(
        m.owner == "project" and parent == posixpath.join(m.path, TASKS_FOLDER)
        for m in request.storage.mounts
    )


def prepare_plan(request: SubmitRequest, default: str) -> dict:
    """What `local/nolinks.py` does as the job's account before its sandbox: its working
    folder made (fresh, when it is the task's own) and its inputs checked and linked, with
    no symbolic link followed on the way (`default`: its own folder, where it works when
    the storage names none)."""
    folder = workdir(request, default)
    base = _base(folder, request) if request.storage.workdir else default
    return {
        "workdir": folder,
        "workdir_base": base or folder,
        "own": own_folder(request),
        "workdir_refused": workdir_refused(folder),
        "workdir_taken": workdir_taken(folder),
        "inputs": [
            [path, _base(path, request), posixpath.basename(link)]
            + [missing_input(path), taken_link(path, link)]
            for path, link in input_links(request, default)
        ],
    }


NOLINKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "local", "nolinks.py")


def script_lines(request: SubmitRequest, default: str) -> list[str]:
    """A batch script's lines, run as the job's account before its sandbox: the umask, its
    working folder made and its inputs linked into it without following a link on the way
    (`local/nolinks.py`, run by the node's python3), and a failure's reason written to
    `default`, its own folder, where it works when the storage names none."""
    with open(NOLINKS, encoding="utf-8") as f:
        source = f.read()
    plan = json.dumps(prepare_plan(request, default), separators=(",", ":"))
    reason = shlex.quote(posixpath.join(default, INPUT_REASON))
    return [
        f"umask {umask(request):03o}",
        f"m=$(python3 -I -S -c {shlex.quote(source)} {shlex.quote(plan)}) || "
        f'{{ m="${{m:-{UNCHECKED}}}"; echo "$m" >&2; printf %s "$m" > {reason}; '
        f"exit {INPUT_EXIT}; }}",
    ]
