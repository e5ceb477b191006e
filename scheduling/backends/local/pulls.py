"""Local jobs waiting for their image: pulled off the dispatch path and off the root's lock
(docs/containers.md, "On the local backend").

A job with an image is stored at once, pending. Its state's `image_pull` says how far its
image is:

    {"digest", "since": when it began waiting, "starts": pullers started for it,
     "finished": false, "done", "total", "seconds"}          while it waits for the image
    {..., "finished": true, "seconds", "bytes", "note"}     once the image is here

While it waits, the scheduling pass leaves it out (it holds no capacity) and follows its
image's pull here: a detached puller process per image (puller.py), started where none
runs, writes `<root>/pulls/<hex>.json` as it goes; the job's reason says "pulling image 43%
(12/28 MB)". Once the image is in the cache the job is placed like any other; if the pull
failed it fails with the puller's reason (a retry is a new job: it pulls again). An image
evicted after its pull and before its job started is pulled again the same way (`again`):
the start, under the root's lock, only ever pins an image that is here.

The time and bytes the job waited for are reported with it (Job.pull) and recorded on the
attempt by the engine; the job's supervisor starts only once the image is here, so neither
its walltime nor its accounted run (started_at to ended_at) counts the pull.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from django.conf import settings

from scheduling.backends.base import SubmitRequest
from scheduling.backends.local.images import image_cache
from scheduling.backends.local.jobstore import JobStore, read_json, write_json_atomic

PULLING = "pulling image"
# A puller that died (killed, machine restarted) is started again; after this many, the job
# fails instead.
MAX_STARTS = 3
# Imported by path, like the supervisor: the package's __init__ would load the backend
# (and Django), which the puller does without.
_HERE = Path(__file__).resolve().parent
_RUN_PULLER = (
    f"import sys; sys.path[:0] = [{str(_HERE.parents[2])!r}, {str(_HERE)!r}]; "
    "import puller; sys.exit(puller.main(sys.argv))"
)
_SITE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
# Pullers this process started, reaped as it passes (no zombies).
_PULLERS: list[subprocess.Popen[bytes]] = []


def begin(root: str, request: SubmitRequest, now: float) -> dict[str, Any] | None:
    """The pull of a job about to be stored: None without an image; finished at once when
    its image is in the cache already; else waiting since `now` (the pass starts its puller)."""
    digest = request.spec.image_digest
    if not digest:
        return None
    image = image_cache(root).get(digest)
    if image is not None:
        note = f"image {request.spec.image} was cached on this node"
        return {"digest": digest, "since": now, "finished": True, "seconds": 0.0, "bytes": 0,
                "total": image.image_bytes, "note": note}  # fmt: skip
    return {"digest": digest, "since": now, "starts": 0, "finished": False, "done": 0,
            "total": None, "seconds": 0.0}  # fmt: skip


def again(state: dict[str, Any], now: float) -> None:
    """The job's image was evicted before it started: it waits for a new pull."""
    pull = state["image_pull"]
    pull.update(since=now, finished=False, done=0, total=None, seconds=0.0)
    pull.setdefault("starts", 0)
    state["reason"] = f"{PULLING} (it was removed from this node's cache before the job started)"


def waiting(state: dict[str, Any]) -> bool:
    pull = state.get("image_pull")
    return pull is not None and not pull["finished"]


def note(state: dict[str, Any]) -> str:
    """What the job's image took, for its running reason ("" without an image)."""
    pull = state.get("image_pull")
    return str(pull.get("note", "")) if pull and pull["finished"] else ""


def follow(root: str, store: JobStore, states: dict[str, dict], now: float) -> dict[str, str]:
    """Follow the pulls of the jobs among `states` (the pass's, under the root's lock) that
    wait for their image: a puller started where none runs, progress or the end written to
    each job's state. Returns the jobs whose pull failed, with the reason (to fail them)."""
    _PULLERS[:] = [p for p in _PULLERS if p.poll() is None]
    failed: dict[str, str] = {}
    for key, state in states.items():
        if state["state"] != "pending" or not waiting(state):
            continue
        before = dict(state["image_pull"]), state.get("reason")
        why = _follow_one(root, store, key, state, now)
        if why:
            failed[key] = why
        elif (dict(state["image_pull"]), state.get("reason")) != before:
            store.write_state(key, state)
    return failed


def _follow_one(root: str, store: JobStore, key: str, state: dict, now: float) -> str:
    pull = state["image_pull"]
    digest, since = pull["digest"], float(pull["since"])
    hexa = digest.partition(":")[2]
    status = _read_status(root, hexa)
    cache = image_cache(root)
    image = cache.get(digest)
    if image is not None:  # here: pulled by its puller, or by anyone meanwhile
        ended = now
        if status.get("ok") and float(status.get("ended", 0)) >= since:
            ended = min(now, float(status["ended"]))
        elif image.last_used >= since:  # image.json is written as the pull ends
            ended = min(now, image.last_used)
        seconds = round(max(0.0, ended - since), 3)
        name = store.request(key).spec.image
        pull.update(
            finished=True,
            seconds=seconds,
            bytes=image.pull_bytes,
            total=image.image_bytes,
            note=f"image {name} pulled in {seconds:.1f}s ({image.pull_bytes / 1e6:.1f} MB), "
            "not counted in its walltime",
        )
        return ""
    if status.get("finished") and not status.get("ok") and float(status["ended"]) >= since:
        return str(status.get("error") or f"{PULLING} failed")
    pull["seconds"] = round(max(0.0, now - since), 3)
    limit = 3 * float(settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S) + 60
    if _running(root, hexa):
        if now - float(status.get("started", now)) > limit:
            return f"{PULLING} did not end in {limit:g}s"
        pull["done"], pull["total"] = int(status.get("done") or 0), status.get("total")
        state["reason"] = _progress(pull["done"], pull["total"])
        return ""
    if int(pull.get("starts", 0)) >= MAX_STARTS:
        return (
            f"{PULLING} stopped {MAX_STARTS} times without an end (the puller was killed, or "
            f"the image was evicted again before its job started): see {_path(root, hexa, 'err')}"
        )
    pull["starts"] = int(pull.get("starts", 0)) + 1
    pull["done"], pull["total"] = 0, None
    _start(root, store.request(key).spec.image or "", digest, now)
    state["reason"] = PULLING
    return ""


def _progress(done: int, total: int | None) -> str:
    if not total:
        return PULLING
    return f"{PULLING} {min(100, done * 100 // total)}% ({done / 1e6:.0f}/{total / 1e6:.0f} MB)"


def _folder(root: str) -> str:
    folder = os.path.join(root, "pulls")
    if not os.path.isdir(folder):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


def _path(root: str, hexa: str, ext: str) -> str:
    return os.path.join(_folder(root), f"{hexa}.{ext}")


def _read_status(root: str, hexa: str) -> dict[str, Any]:
    try:
        data = read_json(_path(root, hexa, "json"))
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _running(root: str, hexa: str) -> bool:
    """Whether a puller of the image lives (it holds the image's lock while it does)."""
    fd = os.open(_path(root, hexa, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _start(root: str, image: str, digest: str, now: float) -> None:
    """Start the image's puller with its lock taken here and handed over (so that it is
    held from this moment: a second pass never starts a second puller). Not waited for."""
    hexa = digest.partition(":")[2]
    fd = os.open(_path(root, hexa, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # another pass started one just now
        status = _path(root, hexa, "json")
        write_json_atomic(status, {"started": now, "finished": False, "done": 0, "total": None})
        cache = image_cache(root)
        params = {
            "cache": str(cache.root),
            "cap_bytes": cache.cap_bytes,
            "max_unpacked_bytes": cache.max_unpacked_bytes,
            "max_pull_bytes": cache.max_pull_bytes,
            "timeout_s": float(settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S),
            "image": image,
            "digest": digest,
            "status": status,
            "started": now,
        }
        with open(_path(root, hexa, "err"), "ab") as err, contextlib.suppress(OSError):
            # An interpreter that cannot start leaves the lock free: the next pass tries
            # again (MAX_STARTS), then fails the job.
            _PULLERS.append(
                subprocess.Popen(
                    [sys.executable, "-I", "-c", _RUN_PULLER, json.dumps(params)],
                    pass_fds=(fd,),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env=_SITE_ENV,
                    cwd="/",
                    start_new_session=True,
                )
            )
    finally:
        os.close(fd)
