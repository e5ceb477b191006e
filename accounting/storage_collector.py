"""The storage collector shipped with the portal (`manage.py collector storage`): it measures
each project's and each user's folder of each storage area and sends the bytes through the
sample ingest API, like any other collector (docs/storage.md, docs/accounting.md).

A folder's bytes are what `du -sB1` counts: the space allocated to everything in it (blocks
× 512, the folder itself included), each hard-linked file once, links never followed. A
sample stands for one period of `every` seconds (a bucket aligned to the epoch): its id
names the area, the folder and the bucket, so measuring again within the same period sends
the same ids and the portal stores nothing twice.
"""

from __future__ import annotations

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
    allocated: int  # bytes, as `du -sB1`
    unreadable: int  # folders that could not be listed (not counted)


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
    """The bytes allocated to `path` and everything below it (`du -sB1 path`); None when
    it is not a folder (not made yet, or a link: the portal's folders are never links)."""
    try:
        top = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(top.st_mode):
        return None
    total = top.st_blocks * 512
    linked: set[tuple[int, int]] = set()
    unreadable = 0
    todo = [path]
    while todo:
        try:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue  # removed while we looked
                    if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                        if (info.st_dev, info.st_ino) in linked:
                            continue  # a hard link of a file counted already
                        linked.add((info.st_dev, info.st_ino))
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        todo.append(entry.path)
        except FileNotFoundError:
            continue
        except PermissionError:
            unreadable += 1
    return Size(total, unreadable)


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
        size = measure(folder.path)
        if size is None:
            done.missing += 1
            continue
        done.folders += 1
        if size.unreadable:
            done.unreadable += size.unreadable
            log.warning("%s: %d folder(s) could not be read", folder.path, size.unreadable)
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
