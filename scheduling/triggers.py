"""Trigger files ("data ready" flags) that release a waiting task (docs/workflows.md).

A trigger lies in a folder the task's jobs mount (its project's, its user's, a site area's:
where the step before it writes its flag) or under one of the configured roots
(`SWITCHYARD_TRIGGER_ROOTS`); the rule is `scheduling/decisions/triggers.py`. The path is
resolved again at every check, so a symlink planted later cannot lead the check outside
those folders: into another project's folder or the portal's files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from django.conf import settings

from scheduling.decisions.storage import AreaView
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
    """`ready` (the file is there, inside its folders), `absent`, or `outside` (a link on
    its way leads out of them: it is not looked at, whatever is there)."""
    real = os.path.realpath(path)
    if trigger_problem(path, real, allowed) is not None:
        return "outside"
    try:
        # lstat: the resolved path has no link left; one put in its place since is not
        # followed either.
        os.lstat(real)
    except OSError:
        return "absent"
    return "ready"
