"""Which ended jobs' folders go so that each user's and each project's stay within a total.

Pure: the local backend's housekeeping measures the folders and removes what this returns
(docs/security.md, Limits). Retention alone bounds a folder's age, and the per-job disk limit
its size, but not how many folders one user or project keeps: N jobs would hold N times
the per-job limit for as long as retention lasts.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class EndedFolder:
    key: str
    user: str
    project: str
    bytes: int
    ended: float  # epoch seconds


def over_totals(
    folders: Iterable[EndedFolder], *, per_user: int | None, per_project: int | None
) -> list[EndedFolder]:
    """The folders to remove, oldest ended first, until every user's and every project's
    ended folders together hold at most `per_user` / `per_project` bytes (None: no total).

    Only the folders of a user or project over its total go, and of those the oldest first:
    another user's folders never make room for them.
    """
    folders = sorted(folders, key=lambda f: (f.ended, f.key))
    users: Counter[str] = Counter()
    projects: Counter[str] = Counter()
    for f in folders:
        users[f.user] += f.bytes
        projects[f.project] += f.bytes
    remove = []
    for f in folders:
        if (per_user is not None and users[f.user] > per_user) or (
            per_project is not None and projects[f.project] > per_project
        ):
            remove.append(f)
            users[f.user] -= f.bytes
            projects[f.project] -= f.bytes
    return remove
