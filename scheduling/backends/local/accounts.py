"""The Unix account a local job runs as: the researcher's own, else the service account; never
root (docs/security.md)."""

from __future__ import annotations

import os
import pwd


def job_account(run_as: str | None, service_account: str) -> tuple[int, int] | None:
    """The (uid, gid) a job runs as: the researcher's own account, else the service account.

    A worker that is not root cannot change user: its jobs run as itself (never root, since
    it is not), and a researcher's mapped account it cannot become is refused. Raises
    JobAccountError saying why a job cannot run.
    """
    if os.geteuid() != 0:
        if run_as and _uid_of(run_as) != os.geteuid():
            raise JobAccountError(
                f"this worker is not root, so it cannot run jobs as {run_as!r} (the researcher's "
                "cluster account); run the worker as root, or remove the mapping"
            )
        return None
    name = run_as or service_account
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        what = "the researcher's cluster account" if run_as else "the job service account"
        raise JobAccountError(f"no Unix account {name!r} ({what}) on this machine") from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise JobAccountError(f"refusing to run a job as {name!r}: it is root (uid or gid 0)")
    return entry.pw_uid, entry.pw_gid


class JobAccountError(Exception):
    pass


def _uid_of(name: str) -> int | None:
    try:
        return pwd.getpwnam(name).pw_uid
    except KeyError:
        return None
