"""A job's secret_env on Slurm: never in the batch script, which Slurm keeps and shows to
its operators and the job's owner (`scontrol write batch_script`), but in a file of the job's
own folder that only the job's account may read, which the script sources (docs/security.md).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from scheduling.backends.base import BackendError

SECRET_ENV_FILE = ".secret-env"
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def prepare(jobdir: Path, values: Sequence[tuple[str, str]], account: str) -> list[str]:
    """Write `values` for the job (0400, its account's from the first byte, in its folder,
    no symlink followed, no earlier file reused); the script's lines that read them."""
    if not values:
        return []
    entry = pwd.getpwnam(account)
    for name, _ in values:
        if not _ENV_NAME_RE.match(name):
            raise BackendError(f"environment name {name!r} is not allowed")
    jobdir.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        jobdir.mkdir(mode=0o700)  # the backend hands it to the job's account next
    path = jobdir / SECRET_ENV_FILE
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a resubmission of the same key writes it afresh
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
    try:
        os.fchown(fd, entry.pw_uid, entry.pw_gid)
        with os.fdopen(fd, "w") as fh:
            fh.writelines(f"export {name}={shlex.quote(value)}\n" for name, value in values)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise
    return [f". {shlex.quote(str(path))}"]
