"""The storage collector shipped with the portal (`manage.py collector storage`): it measures
each project's and each user's folder of each storage area and sends the bytes through the
sample ingest API, like any other collector (docs/storage.md, docs/accounting.md).

A folder's bytes are what `du -sxB1` counts: the space allocated to everything in it on its
file system (blocks × 512, the folder itself included), each hard-linked file once, links
never followed. A folder that cannot be measured whole is logged, and the others still go. A
sample stands for one period of `every` seconds (a bucket aligned to the epoch): its id
names the area, the folder and the bucket, so measuring again within the same period sends
the same ids and the portal stores nothing twice.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from portal.models import Membership, Project
from scheduling.decisions.storage import AreaView
from scheduling.usage import storage_areas

log = logging.getLogger(__name__)

SAMPLES_PATH = "/api/v1/usage/samples/"
BATCH = 1000
MAX_ID = 100  # the ingest API's longest sample id


@dataclass(frozen=True, slots=True)
class Folder:
    """An owner's folder of an area, and the projects its bytes are billed to."""

    area: str
    kind: str  # "project" or "user"
    owner: str  # the project's slug or the user's name
    path: str
    projects: tuple[str, ...]  # a project folder's own; a user's projects, in equal shares


@dataclass(frozen=True, slots=True)
class Size:
    allocated: int  # bytes, as `du -sxB1`
    unreadable: int  # entries and folders that could not be read (not counted)
    first_error: str = ""  # the first of them, for the log


def folders(areas: Iterable[AreaView] | None = None) -> list[Folder]:
    """Every folder the portal makes in the site's areas: each project's folder of each
    project area, each member's folder of each user area. A site area has one folder that
    belongs to no project: it is not metered. A user in no project has nobody to bill."""
    areas = list(storage_areas() if areas is None else areas)
    slugs = list(Project.objects.order_by("slug").values_list("slug", flat=True))
    users: dict[str, list[str]] = {}
    for username, slug in (
        Membership.objects.order_by("user__username", "project__slug")
        .values_list("user__username", "project__slug")
        .iterator()
    ):
        users.setdefault(username, []).append(slug)
    owners: dict[str, list[tuple[str, tuple[str, ...]]]] = {
        "project": [(s, (s,)) for s in slugs],
        "user": [(u, tuple(p)) for u, p in users.items()],
    }
    found = []
    for area in areas:
        for owner, projects in owners.get(area.owner, []):
            try:
                path = area.folder(owner)
            except ValueError:
                continue  # a name that cannot be a folder's: the portal made none
            found.append(Folder(area.name, area.owner, owner, path, tuple(projects)))
    return found


def measure(path: str) -> Size | None:
    """The bytes allocated to `path` and everything below it on its file system (`du -sxB1
    path`); None when it is not a folder (not made yet, or a link: the portal's folders are
    never links).

    The walk never goes by path: each folder is opened by its name relative to its parent's
    open handle without following a link (`O_NOFOLLOW`), listed through that handle, and
    left through `..` checked to be the folder it came from — so a link swapped in for a
    folder after it was looked at is never followed, a tree deeper than PATH_MAX is walked
    whole, and one handle is open at a time. An entry or folder that cannot be read (removed,
    swapped, not listable) is counted in `unreadable` and the walk goes on."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return None  # a link or a file where the folder should be
        raise
    try:
        top = os.fstat(fd)
        walk = _Walk(top)
        fd = walk.run(fd)
    finally:
        os.close(fd)
    return Size(walk.total, walk.unreadable, walk.first_error)


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _Walk:
    """An iterative depth-first walk below an open folder, one handle open at a time."""

    def __init__(self, top: os.stat_result) -> None:
        self.dev = top.st_dev
        self.total = top.st_blocks * 512
        self.unreadable = 0
        self.first_error = ""
        self.linked: set[int] = set()

    def failed(self, where: str, exc: OSError) -> None:
        self.unreadable += 1
        if not self.first_error:
            self.first_error = f"{where}: {exc.strerror or exc}"

    def run(self, fd: int) -> int:
        """Walk below `fd`; the handle open at the end (the top's, unless the walk had to stop
        part way), for the caller to close."""
        top = os.fstat(fd)
        # Each level: the folder's identity and its subfolders not walked yet.
        stack: list[tuple[int, list[str]]] = [(top.st_ino, self.scan(fd, "."))]
        while stack:
            ino, todo = stack[-1]
            if todo:
                name = todo.pop()
                try:
                    child = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue  # removed while we looked
                except OSError as exc:  # not listable, or swapped for a file or a link
                    self.failed(name, exc)
                    continue
                info = os.fstat(child)
                if info.st_dev != self.dev:  # a mount swapped in: not this file system's
                    os.close(child)
                    continue
                os.close(fd)
                fd = child
                stack.append((info.st_ino, self.scan(fd, name)))
                continue
            stack.pop()
            if not stack:
                break
            try:
                parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                self.failed("..", exc)
                return fd
            info = os.fstat(parent)
            os.close(fd)
            fd = parent
            if (info.st_dev, info.st_ino) != (self.dev, stack[-1][0]):
                # The folder was moved away while we were in it: what is left is not known
                # to be below the top any more.
                self.failed("..", OSError(errno.ESTALE, "a folder moved during the walk"))
                return fd
        return fd

    def scan(self, fd: int, where: str) -> list[str]:
        """Count the folder's entries (lstat only: nothing is opened); its subfolders on the
        same file system, to walk."""
        subfolders = []
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed while we looked
                    except OSError as exc:
                        self.failed(entry.name, exc)
                        continue
                    if stat.S_ISDIR(info.st_mode):
                        if info.st_dev != self.dev:
                            continue  # a mount point: another file system (`du -x`)
                        subfolders.append(entry.name)
                    elif info.st_nlink > 1:
                        if info.st_ino in self.linked:
                            continue  # a hard link of a file counted already
                        self.linked.add(info.st_ino)
                    self.total += info.st_blocks * 512
        except OSError as exc:
            self.failed(where, exc)
        return subfolders


def bucket(now: float, every: int) -> int:
    """The start (epoch seconds) of the period `now` falls in."""
    return int(now // every) * every


def samples(folder: Folder, size: int, start: int, every: int) -> list[dict]:
    """The folder's samples for the period starting at `start`: one for a project's folder;
    for a user's, one per project of theirs with an equal share (the first ones by name take
    the bytes left over, so the shares add up to the folder's bytes)."""
    at = datetime.fromtimestamp(start, UTC).isoformat()
    base = {"metric": "storage", "area": folder.area, "seconds": every, "at": at}
    if folder.kind == "project":
        sid = _sample_id(f"{folder.area}/{folder.owner}@{start}")
        return [{**base, "id": sid, "project": folder.owner, "bytes": size}]
    share, left = divmod(size, len(folder.projects))
    return [
        {
            **base,
            "id": _sample_id(f"{folder.area}/{folder.owner}>{project}@{start}"),
            "project": project,
            "user": folder.owner,
            "bytes": share + (1 if i < left else 0),
        }
        for i, project in enumerate(folder.projects)
    ]


def _sample_id(text: str) -> str:
    if len(text) <= MAX_ID:
        return text
    return f"{text[: MAX_ID - 41]}~{hashlib.sha256(text.encode()).hexdigest()[:40]}"


class SendError(Exception):
    pass


def send(url: str, token: str, batch: list[dict], *, timeout: float = 60) -> dict:
    """POST one batch to the ingest API; its answer ({recorded, already})."""
    request = urllib.request.Request(
        url.rstrip("/") + SAMPLES_PATH,
        data=json.dumps({"samples": batch}).encode(),
        headers={"Authorization": f"Collector {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        body = exc.read()[:2000].decode(errors="replace")
        raise SendError(f"{exc.code} {exc.reason}: {body}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise SendError(f"cannot reach {url}: {exc}") from None


@dataclass(slots=True)
class Pass:
    """What one pass measured and sent."""

    folders: int = 0
    missing: int = 0
    unreadable: int = 0
    samples: int = 0
    recorded: int = 0
    already: int = 0


def collect(
    url: str, token: str, *, every: int, now: float | None = None, batch: int = BATCH
) -> Pass:
    """Measure every folder for the current period and send the samples, `batch` at a
    time. SendError when a batch is refused or the portal cannot be reached."""
    start = bucket(time.time() if now is None else now, every)
    done = Pass()
    for chunk in _batches(_measured(done, start, every), batch):
        answer = send(url, token, chunk)
        done.samples += len(chunk)
        done.recorded += int(answer.get("recorded", 0))
        done.already += int(answer.get("already", 0))
    return done


def _measured(done: Pass, start: int, every: int) -> Iterator[dict]:
    for folder in folders():
        try:
            size = measure(folder.path)
        except OSError as exc:  # the folder itself cannot be opened: nothing to send for it
            done.unreadable += 1
            log.warning("%s: not measured: %s", folder.path, exc.strerror or exc)
            continue
        if size is None:
            done.missing += 1
            continue
        done.folders += 1
        if size.unreadable:
            done.unreadable += size.unreadable
            log.warning(
                "%s: %d entr(y/ies) below it could not be read and are not counted (%s)",
                folder.path,
                size.unreadable,
                size.first_error,
            )
        yield from samples(folder, size.allocated, start, every)


def _batches(items: Iterable[dict], size: int) -> Iterator[list[dict]]:
    chunk: list[dict] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
