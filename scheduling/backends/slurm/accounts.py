"""Projects as Slurm accounts: made on first use, their fair-share kept in step with the
portal's (docs/policy.md).

A mixin of SlurmBackend: it runs the same commands (`self.run`).
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable

from scheduling.backends.base import BackendError

_ACCOUNT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


class SlurmAccounts:
    run: Callable[..., str]  # the CommandRunner of the backend
    cluster: str
    _known_associations: set[tuple[str, str]]

    def ensure_association(self, project: str, unix_user: str | None) -> None:
        """Make the project's Slurm account (and the user's association with it) exist."""
        account = account_name(project)
        user = unix_user or _current_user()
        if (account, user) in self._known_associations:
            return
        for argv in (
            [
                "sacctmgr",
                "-i",
                "add",
                "account",
                account,
                f"cluster={self.cluster}",
                f"description=switchyard project {account}",
            ],
            [
                "sacctmgr",
                "-i",
                "add",
                "user",
                user,
                f"account={account}",
                f"cluster={self.cluster}",
            ],
        ):
            try:
                self.run(argv)
            except BackendError as exc:
                # sacctmgr exits non-zero when there is "nothing new" to add.
                if "Nothing new added" not in str(exc) and "already exists" not in str(exc):
                    raise
        self._known_associations.add((account, user))

    def set_account_share(self, project: str, shares: int) -> None:
        """The project's fair-share shares as its account's `Fairshare` (docs/policy.md)."""
        self.run(
            [
                "sacctmgr",
                "-i",
                "modify",
                "account",
                "where",
                f"name={account_name(project)}",
                f"cluster={self.cluster}",
                "set",
                f"fairshare={max(1, int(shares))}",
            ]
        )


def account_name(project: str) -> str:
    if not _ACCOUNT_RE.match(project):
        raise BackendError(f"project {project!r} cannot be a Slurm account name")
    return project


def _current_user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name
