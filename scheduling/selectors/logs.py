"""A task's log, read from the file its backend writes the job's output to.

The engine records that file on the attempt when it submits the job (`Attempt.log_path`, as
the backend names it: the local backend's kept copy of the job's output, Slurm's `--output`),
so a page or an API call reads a file and never calls a backend.
"""

from __future__ import annotations

import os

from portal.errors import ApplicationError
from scheduling.logtext import decode_log, raw_length
from scheduling.models import Attempt, Task

LIMIT = 1 << 20


def task_log(*, task: Task, offset: int = 0, limit: int = LIMIT) -> str:
    """The output of the task's current (or last) attempt so far, `limit` bytes from `offset`
    ("" before the job has written any). Unreadable: ApplicationError 503."""
    return _read(task, offset, limit)[0]


def task_log_end(*, task: Task, limit: int = LIMIT) -> tuple[str, int]:
    """The last `limit` bytes of the task's log, and how many bytes before them are left out
    (a failure's reason is usually at the end)."""
    return _read(task, None, limit)


def _read(task: Task, offset: int | None, limit: int) -> tuple[str, int]:
    """`limit` bytes from `offset` (None: the last ones), and where they start."""
    if not task.backend_id:
        return "", 0
    path = (
        Attempt.objects.filter(task=task, backend_id=task.backend_id)
        .order_by("-number")
        .values_list("log_path", flat=True)
        .first()
    )
    if not path:
        return "", 0
    try:
        with open(path, "rb") as f:
            if offset is None:
                offset = max(0, f.seek(0, os.SEEK_END) - max(0, limit))
            f.seek(max(0, offset))
            return decode_log(f.read(max(0, limit))), max(0, offset)
    except (FileNotFoundError, NotADirectoryError):
        return "", 0
    except OSError as exc:
        raise ApplicationError(f"the log could not be read: {exc}", status=503) from exc


def log_raw_length(text: str) -> int:
    """How many bytes of the raw log a chunk from `task_log` stands for: where a reader's next
    offset is (invalid UTF-8 shows as U+FFFD, longer than the byte it replaces)."""
    return raw_length(text)
