"""Local jobs waiting for their image: pulled off the dispatch path and off the root's lock
(docs/containers.md, "On the local backend").

A job with an image is stored at once, pending. Its state's `image_pull` says how far its
image is:

    {"digest", "since": when it began waiting, "starts": pullers started for it that died
     or are running, "finished": false, "done", "total", "seconds"}   while it waits
    {..., "finished": true, "seconds", "bytes", "note"}     once the image is here

While it waits, the scheduling pass leaves it out (it holds no capacity) and follows its
image's pull here: a detached puller process per image (puller.py), started where none
runs, writes `<root>/pulls/<hex>.json` as it goes; the job's reason says "pulling image 43%
(12/28 MB)". At most SWITCHYARD_IMAGE_MAX_PULLS pullers run per backend root: each holds
one of that many slot locks (`<root>/pulls/slot.<n>.lock`) for as long as it lives, and the
jobs whose image finds no free slot wait, "pulling image (queued behind N pulls)", the
oldest first when a slot frees. Once the image is in the cache the job is placed like any other; if the pull
failed it fails with the puller's reason (a retry is a new job: it pulls again). An image
evicted after its pull and before its job started is pulled again the same way (`again`):
the start, under the root's lock, only ever pins an image that is here. Such a re-pull
does not count towards MAX_STARTS (only pullers that died do): under a full node, pending
jobs' images may push one another out of the cache many times.

The time and bytes the job waited for are reported with it (Job.pull) and recorded on the
attempt by the engine; the job's supervisor starts only once the image is here, so neither
its walltime nor its accounted run (started_at to ended_at) counts the pull.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
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
# fails instead. A pull that ended well whose image was evicted before the job started is
# not counted.
MAX_STARTS = 3
# What the puller's environment keeps of the worker's, besides PATH and LANG: the proxy
# through which the site confines skopeo (docs/containers.md, "Known limits") and the
# node's registry credentials.
PASSED_ENV = (
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
    "REGISTRY_AUTH_FILE",
)  # fmt: skip
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
log = logging.getLogger(__name__)


def puller_env() -> dict[str, str]:
    """The puller's environment: the site's PATH and LANG, and what PASSED_ENV names."""
    return {**_SITE_ENV, **{k: os.environ[k] for k in PASSED_ENV if k in os.environ}}


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
    pull.update(since=now, finished=False, done=0, total=None, seconds=0.0, starts=0)
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
    queue = _Queue(root)
    pending = [(k, s) for k, s in states.items() if s["state"] == "pending" and waiting(s)]
    for key, state in sorted(pending, key=lambda ks: float(ks[1]["image_pull"]["since"])):
        before = dict(state["image_pull"]), state.get("reason")
        why = _follow_one(root, store, key, state, now, queue)
        if why:
            failed[key] = why
        elif (dict(state["image_pull"]), state.get("reason")) != before:
            store.write_state(key, state)
    return failed


class _Queue:
    """The pull slots of one pass: how many pullers run (counted once, when first asked),
    and the images that found none, in the order their oldest job asked."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.limit = max(1, int(settings.SWITCHYARD_IMAGE_MAX_PULLS))
        self.running: int | None = None
        self.queued: list[str] = []

    def behind(self, digest: str) -> int | None:
        """How many pulls the image waits behind, or None if it may start now."""
        if digest in self.queued:
            return self._running() + self.queued.index(digest)
        if self._running() < self.limit:
            return None
        self.queued.append(digest)
        return self._running() + len(self.queued) - 1

    def started(self) -> None:
        self.running = self._running() + 1

    def _running(self) -> int:
        if self.running is None:
            self.running = sum(_held(_slot(self.root, n)) for n in range(self.limit))
        return self.running


def _follow_one(
    root: str, store: JobStore, key: str, state: dict, now: float, queue: _Queue
) -> str:
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
    ended_since = status.get("finished") and float(status.get("ended", 0)) >= since
    if ended_since and not status.get("ok"):
        why = str(status.get("error") or f"{PULLING} failed")
        log.warning("%s (the puller's output: %s)", why, _path(root, hexa, "err"))
        return why
    if ended_since:  # it pulled the image, which was evicted before the job started
        pull["starts"] = 0
    pull["seconds"] = round(max(0.0, now - since), 3)
    limit = 3 * float(settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S) + 60
    if _running(root, hexa):
        if now - float(status.get("started", now)) > limit:
            return f"{PULLING} did not end in {limit:g}s"
        pull["done"], pull["total"] = int(status.get("done") or 0), status.get("total")
        state["reason"] = _progress(pull["done"], pull["total"])
        return ""
    if int(pull.get("starts", 0)) >= MAX_STARTS:
        log.warning(
            "the puller of %s stopped %d times without an end: see %s",
            digest,
            MAX_STARTS,
            _path(root, hexa, "err"),
        )
        return (
            f"{PULLING} stopped {MAX_STARTS} times without an end (its puller was killed); "
            "the worker's log says more"
        )
    pull["done"], pull["total"] = 0, None
    behind = queue.behind(digest)
    if behind is not None:
        state["reason"] = f"{PULLING} (queued behind {behind} pulls)"
        return ""
    if _start(root, store.request(key).spec.image or "", digest, now, queue.limit):
        queue.started()
        pull["starts"] = int(pull.get("starts", 0)) + 1
        state["reason"] = PULLING
    else:  # another process took the last slot meanwhile: the next pass tries again
        state["reason"] = f"{PULLING} (queued behind {queue.limit} pulls)"
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
    return _held(_path(root, hexa, "lock"))


def _slot(root: str, n: int) -> str:
    return os.path.join(_folder(root), f"slot.{n}.lock")


def _held(path: str) -> bool:
    """Whether another process holds `path`'s lock."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _take(path: str) -> int | None:
    """`path`'s lock taken (its fd), or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _start(root: str, image: str, digest: str, now: float, slots: int) -> bool:
    """Start the image's puller with its lock and a free pull slot taken here and handed
    over (so that both are held from this moment: a second pass never starts a second
    puller, nor more than `slots`). Not waited for. False if no slot was free or another
    pass started the image's puller just now."""
    hexa = digest.partition(":")[2]
    fd = _take(_path(root, hexa, "lock"))
    if fd is None:
        return False  # another pass started one just now
    slot = None
    try:
        for n in range(slots):
            slot = _take(_slot(root, n))
            if slot is not None:
                break
        if slot is None:
            return False
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
                    pass_fds=(fd, slot),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    env=puller_env(),
                    cwd="/",
                    start_new_session=True,
                )
            )
    finally:
        os.close(fd)
        if slot is not None:
            os.close(slot)
    return True
