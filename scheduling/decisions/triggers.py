"""Where a task's trigger file ("data ready" flag) may lie. Pure: the caller resolves the
paths (docs/workflows.md, docs/storage.md).

A trigger may name a file in any folder the task's jobs mount — its project's folder, its
user's, a site area's — which is where an upstream job writes its flag, or under one of the
site's trigger roots. Anywhere else a user could probe the portal host's file system with it
("does /home/x/.ssh/id_rsa exist?") or another project's folder. Both the path as written and
the path with every symbolic link resolved must lie inside an allowed folder at submission;
the check itself (`scheduling/triggers.py`) walks from the allowed folder and follows no
link at all, so a link planted later cannot lead it out.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from scheduling.decisions.storage import AreaView, owner_name, pool_areas, within


def trigger_folders(areas: Iterable[AreaView], *, pool: str, project: str, user: str) -> list[str]:
    """The folders a task of `pool` (of this project and user) may wait on a file in: every
    folder its jobs mount, read-only ones too (a site's data-ready flag)."""
    found = []
    for area in pool_areas(areas, pool):
        try:
            found.append(area.folder(owner_name(area, project=project, user=user)))
        except ValueError:
            continue  # a user name that cannot name a folder has none in a user area
    return found


@dataclass(frozen=True, slots=True)
class Allowed:
    """The folders a trigger may lie in, as named (the job's folders, the configured roots)
    and as resolved on the host now."""

    folders: tuple[str, ...]
    roots: tuple[str, ...] = ()
    resolved: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = []
        if self.folders:
            parts.append(f"a folder the task's jobs mount ({', '.join(self.folders)})")
        if self.roots:
            parts.append(f"a trigger root ({', '.join(self.roots)})")
        return " or ".join(parts) or "an allowed folder (its queue's pool mounts no storage area)"


def trigger_problem(path: str, resolved: str, allowed: Allowed) -> str | None:
    """Why a task may not wait on `path`, whose symbolic links resolve to `resolved`, or None."""
    if not path.startswith("/") or "//" in path or posixpath.normpath(path) != path.rstrip("/"):
        return "must be a plain absolute path (no '.', '..' or repeated '/' in it)"
    named = (*allowed.folders, *allowed.roots)
    if not within(path, (*named, *allowed.resolved)):
        return f"must lie inside {allowed.describe()}"
    if not within(resolved, allowed.resolved):
        return (
            f"leads outside {allowed.describe()}: a symbolic link on its way points out, "
            "and a trigger does not follow it"
        )
    return None
