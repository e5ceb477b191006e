"""A Slurm job's hold on an image in its node's cache, from its Prolog to its Epilog
(docs/containers.md).

On the local backend a job's supervisor holds a shared lock on the image while it runs (Pin).
A Slurm job has no process of the portal's on its node between its Prolog and its Epilog, so
its hold is a file: `locks/<hex>.jobs/<job id>`, made by the cache's account (the Prolog's
puller) before the image is used, removed by the Epilog. The job's own account can neither
make nor remove one (locks/ is the cache account's). Eviction leaves an image with a
reservation alone; a reservation older than `max_age_s` (a node that crashed before its
Epilog ran) no longer counts.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

_JOB_ID = re.compile(r"^[0-9]{1,18}$")
MAX_AGE_S = 14 * 24 * 3600  # longer than any partition's MaxTime is expected to be


def _check(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise ValueError(f"expected a Slurm job id (digits), got {job_id!r}")
    return job_id


def reserve(locks: Path, hexa: str, job_id: str) -> None:
    """Hold image `hexa` for `job_id`."""
    folder = locks / f"{hexa}.jobs"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / _check(job_id)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    os.utime(path)


def release(locks: Path, job_id: str) -> int:
    """Let go of every image `job_id` holds; how many."""
    count = 0
    for path in locks.glob(f"*.jobs/{_check(job_id)}"):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            count += 1
    return count


def reserved(locks: Path, hexa: str, max_age_s: float = MAX_AGE_S) -> bool:
    """Whether a job holds image `hexa` (a reservation younger than `max_age_s`)."""
    oldest = time.time() - max_age_s
    try:
        entries = list(os.scandir(locks / f"{hexa}.jobs"))
    except FileNotFoundError:
        return False
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            if entry.stat(follow_symlinks=False).st_mtime >= oldest:
                return True
    return False
