"""Per-user and per-project totals for ended jobs' folders on the local backend.

Retention removes an ended job's folder some days after it ends; until then each holds up to
its own disk limit, so many small jobs could fill the disk. These totals remove the oldest
ended folders of a user or project first while together they hold more than allowed
(the choice is decisions/folders.py). A running job's folder is never measured or removed:
it is its own disk limit's business. Logs and final states are kept, as retention keeps them.
"""

from __future__ import annotations

import logging
import sys
import time

from scheduling.backends.local.jobstore import KEY_RE, JobStore
from scheduling.backends.local.jobwatch import folder_usage
from scheduling.decisions.folders import EndedFolder, over_totals

log = logging.getLogger(__name__)


class FolderTotals:
    def __init__(self, *, per_user: int | None, per_project: int | None) -> None:
        self.per_user = per_user or None
        self.per_project = per_project or None
        # key -> (when it ended, its folder as measured): an ended folder no longer changes.
        self._measured: dict[str, tuple[float, EndedFolder]] = {}

    def keep(self, store: JobStore) -> int:
        """Remove ended folders, oldest first, while a user or project is over its total.

        Returns how many it removed.
        """
        if not (self.per_user or self.per_project):
            return 0
        folders = []
        ended = store.ended()
        for key, when in ended:
            known = self._measured.get(key)
            if known is None or known[0] != when:
                try:
                    user, project = store.owner(key)
                except (OSError, ValueError):
                    continue  # removed meanwhile, or not a job's folder
                size, _ = folder_usage([store.jobdir(key)], sys.maxsize)
                known = (when, EndedFolder(key, user, project, size, when))
                self._measured[key] = known
            folders.append(known[1])
        present = {key for key, _ in ended}
        for key in [k for k in self._measured if k not in present]:
            del self._measured[key]
        removed = 0
        for folder in over_totals(folders, per_user=self.per_user, per_project=self.per_project):
            if not KEY_RE.match(folder.key):
                continue
            log.info(
                "removing the folder of job %s (%d bytes, ended %s): the ended folders of "
                "user %s or project %s hold more than their total",
                folder.key,
                folder.bytes,
                time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(folder.ended)),
                folder.user,
                folder.project,
            )
            store.archive(folder.key)
            self._measured.pop(folder.key, None)
            removed += 1
        return removed
