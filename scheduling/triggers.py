"""Trigger files ("data ready" flags) that release a waiting task (docs/workflows.md).

A trigger lies in a folder the task's jobs mount (its project's, its user's, a site area's:
where the step before it writes its flag) or under one of the configured roots
(`SWITCHYARD_TRIGGER_ROOTS`); the rule is `scheduling/decisions/triggers.py`. Every check
walks from that folder one name at a time, never following a symbolic link: resolving the
path first and looking afterwards would let a folder on the way be swapped for a link in
between, and the worker (root) would answer for a file in another project's folder or the
portal's own files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from django.conf import settings

from scheduling.decisions.storage import AreaView, within
from scheduling.decisions.triggers import Allowed, trigger_folders, trigger_problem


def trigger_roots() -> list[str]:
    return [os.path.realpath(root) for root in settings.SWITCHYARD_TRIGGER_ROOTS]


def trigger_allowed(
    areas: Iterable[AreaView], *, pool: str, project: str, user: str, roots: list[str] | None = None
) -> Allowed:
    """The folders a task's trigger may lie in, resolved on this host now."""
    folders = tuple(trigger_folders(areas, pool=pool, project=project, user=user))
    configured = tuple(settings.SWITCHYARD_TRIGGER_ROOTS)
    resolved = (
        *(os.path.realpath(f) for f in folders),
        *(trigger_roots() if roots is None else roots),
    )
    return Allowed(folders=folders, roots=configured, resolved=resolved)


def trigger_path_problem(path: str, allowed: Allowed) -> str | None:
    """Why the task may not wait on `path` (resolved now), or None."""
    return trigger_problem(path, os.path.realpath(path), allowed)


def trigger_state(path: str, allowed: Allowed) -> str:
    """`ready` (the file is there, reached without a link), `absent`, `link` (a symbolic link
    on its way or the file itself: not followed, whatever it points at) or `outside` (not in
    an allowed folder as written)."""
    base = _base(path, allowed) if within(path, ("/",)) else None
    if base is None:
        return "outside"
    names = path[len(base) :].strip("/").split("/")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return "absent"
    try:
        for name in names[:-1]:
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                return "absent"
            if stat.S_ISLNK(st.st_mode):
                return "link"
            try:
                # O_NOFOLLOW: a link swapped in since the stat above is refused (ELOOP), not
                # followed.
                inner = os.open(name, flags, dir_fd=fd)
            except OSError:
                return "absent" if not _is_link(name, fd) else "link"
            os.close(fd)
            fd = inner
        try:
            st = os.stat(names[-1], dir_fd=fd, follow_symlinks=False)
        except OSError:
            return "absent"
        return "link" if stat.S_ISLNK(st.st_mode) else "ready"
    finally:
        os.close(fd)


def _is_link(name: str, fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _base(path: str, allowed: Allowed) -> str | None:
    """The allowed folder the walk starts from: the deepest one `path` lies below (an
    administrator's folder, opened as configured)."""
    below = [
        f.rstrip("/")
        for f in (*allowed.folders, *allowed.roots, *allowed.resolved)
        if path.startswith(f.rstrip("/") + "/")
    ]
    return max(below, key=len) if below else None
