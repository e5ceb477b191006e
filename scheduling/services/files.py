"""Writes in the site's storage through Files: upload, delete, make a folder (docs/storage.md).

Each is done by the file helper as the user's job account (scheduling/files/fileops.py), so a
file a user uploads is their job account's, in their project's group, exactly as if one of
their jobs had written it. An upload streams into a temporary file beside its target, which
is renamed over it only once the whole body has arrived within the size limit.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from django.conf import settings
from django.contrib.auth.models import User

from portal.errors import ApplicationError
from scheduling import outbox
from scheduling.files import fileops
from scheduling.selectors.storage import Folder, as_account


def _writable(folder: Folder) -> None:
    if not folder.writable:
        raise ApplicationError(
            f"the site's area {folder.area.name} is read-only here (its admins fill it)",
            field="path",
            status=403,
        )


def _checked(path: str) -> str:
    try:
        fileops.names(path)
    except fileops.FileOpError as exc:
        raise ApplicationError(str(exc), field="path", got=None) from None
    return path


def file_upload(
    *, user: User, folder: Folder, path: str, chunks: Iterable[bytes], expected: int
) -> dict:
    """Store `chunks` as the file `path` (replacing a file of that name); its entry. Over
    SWITCHYARD_FILES_UPLOAD_MAX_BYTES it is refused (413), and when fewer or more bytes than
    `expected` (the upload's declared length) arrived, as when the client went away mid-body,
    it is refused (400): either way the old file stays as it was and nothing is left behind."""
    _writable(folder)
    _checked(path)
    limit = settings.SWITCHYARD_FILES_UPLOAD_MAX_BYTES
    answer, fd = as_account(user, folder, "temp", path)
    temp = answer["temp"]
    if fd is None:
        raise ApplicationError("the upload's file could not be made", field="path", status=500)
    written = 0
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                written += len(chunk)
                if written > limit:
                    raise ApplicationError(
                        f"a file is at most {limit} bytes here", field="body", status=413
                    )
                out.write(chunk)
        if written != expected:
            raise ApplicationError(
                f"upload cut short: got {written} of {expected} bytes", field="body", got=written
            )
    except BaseException:
        with contextlib.suppress(ApplicationError):
            as_account(user, folder, "discard", path, temp)
        raise
    return as_account(user, folder, "commit", path, temp)[0]


def file_delete(*, user: User, folder: Folder, path: str) -> None:
    """Remove a file, or an empty folder."""
    _writable(folder)
    if not _checked(path):
        raise ApplicationError("the folder itself is not removed here", field="path", status=403)
    as_account(user, folder, "delete", path)


def folder_make(*, user: User, folder: Folder, path: str, name: str) -> dict:
    """Make the folder `name` inside the folder `path`; its entry."""
    _writable(folder)
    try:
        fileops.check_name(name)
    except fileops.FileOpError as exc:
        raise ApplicationError(str(exc), field="mkdir", got=name[:80]) from None
    target = f"{_checked(path).rstrip('/')}/{name}".lstrip("/")
    return as_account(user, folder, "mkdir", target)[0]


def folders_prepare(*, user: User) -> None:
    """Ask a worker to make the user's folders that are not there yet (it runs as root; the
    web process does not make them)."""
    outbox.storage_prepare(user.pk)
