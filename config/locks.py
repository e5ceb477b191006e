"""One holder at a time, across every worker process, for the passes that must not overlap.

A capacity pass that overlaps another could preempt twice for one waiting task, or end a
lease twice; beat runs the passes every few seconds and the portal asks for one at once
after a lease is opened or ended, so two can meet. The lock is PostgreSQL's advisory lock
on PostgreSQL, and a file lock beside the database on the embedded SQLite (one machine).
Neither blocks: a pass that finds the lock held skips, and the next one comes soon.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db import connection


@contextlib.contextmanager
def exclusive(name: str) -> Iterator[bool]:
    """Yields whether this process holds the site-wide lock `name` for the block."""
    if connection.vendor == "postgresql":
        key = int.from_bytes(
            hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True
        )
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
            held = bool(cursor.fetchone()[0])
        try:
            yield held
        finally:
            if held:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    # One lock file per database file, so test runs with databases of their own never meet.
    database = str(connection.settings_dict["NAME"])
    tag = hashlib.blake2b(f"{database}|{name}".encode(), digest_size=6).hexdigest()
    path = Path(settings.VAR_DIR) / f".lock-{tag}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock
