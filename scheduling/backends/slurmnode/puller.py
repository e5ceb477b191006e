"""The pull of a Slurm job's image into its node's cache, run by the Prolog (prolog.py) as
the cache's own account: registry data is never handled by root nor by the job's account.

Reads on stdin what the Prolog passes on from the portal's image file (the image and its
digest, the job's command or script, the names of the environment the task sets, the paths
its sandbox mounts, its work folder, the job id); writes JSON lines on stdout: progress
(`{"state": "progress", "done", "total"}`), then one answer, ready (the sandbox's system
binds over the image, its Env to set, the command and starting folder: imagebox.py) or failed
with a reason a researcher can read. Always exits 0 once it answered.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from scheduling.backends.imagebox import (
    BUSYBOX,
    CannotRun,
    host_busybox,
    image_python,
    image_run,
    no_python,
    rootfs_binds,
)
from scheduling.backends.images import ImageCache, ImageError, Skopeo
from scheduling.backends.images.cache import CachedImage
from scheduling.backends.images.reservations import reserve
from scheduling.decisions.images import ImageRefError, parse_image_ref

BUSYBOX_MISSING = (
    "a task with an image needs the node's static busybox (Debian's busybox-static) to set "
    "its limits inside the image: this node has none"
)


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="switchyard-puller")
    parser.add_argument("--cache", required=True)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--cap-mb", type=int, default=None)
    parser.add_argument("--max-unpacked-mb", type=int, default=None)
    args = parser.parse_args(argv)
    request = json.loads(sys.stdin.read(1 << 20))
    try:
        _say(ready(args, request))
    except (ImageError, CannotRun, ImageRefError, ValueError) as exc:
        what = getattr(exc, "reason", None) or str(exc)
        _say({"state": "failed", "reason": f"pulling image {request.get('image')} failed: {what}"})
    except OSError as exc:
        # Not the job's doing: the Prolog fails, and slurmd drains the node.
        _say({"state": "failed", "reason": f"this node's image cache failed: {exc}", "node": 1})
    return 0


def ready(args: argparse.Namespace, request: dict[str, Any]) -> dict[str, Any]:
    cache = ImageCache(
        args.cache,
        cap_bytes=args.cap_mb << 20 if args.cap_mb else None,
        max_unpacked_bytes=args.max_unpacked_mb << 20 if args.max_unpacked_mb else None,
        skopeo=Skopeo(timeout_s=args.timeout),
        unpack_timeout_s=args.timeout,
    )
    # Named in full at submission: the default registry is never used here.
    ref = parse_image_ref(str(request["image"]), default_registry="localhost")
    ref = ref.with_digest(str(request["digest"]))
    assert ref.digest is not None
    pulled = cache.get(ref.digest) is None
    total = 0

    def progress(done: int, all_bytes: int) -> None:
        nonlocal total
        total = all_bytes
        _say({"state": "progress", "done": done, "total": all_bytes or None})

    image = _reserved(cache, ref, str(request["job_id"]), progress)
    if request.get("session") and image_python(str(image.rootfs)) is None:
        raise CannotRun(no_python(str(request["image"])))
    busybox = host_busybox()
    if busybox is None:
        raise CannotRun(BUSYBOX_MISSING)
    needed = [str(p) for p in request["needed"]]
    system = [*rootfs_binds(str(image.rootfs), needed), "--ro-bind", busybox, BUSYBOX]
    argv, env, chdir = image_run(
        image,
        command=request.get("command"),
        script=request.get("script"),
        given=list(request.get("given") or ()),
        work=str(request["work"]),
    )
    return {
        "state": "ready",
        "pulled": pulled,
        "digest": image.digest,
        "rootfs": str(image.rootfs),
        "total": total or image.image_bytes,
        "pull_bytes": image.pull_bytes if pulled else 0,
        "system": system,
        "env": env,
        "argv": argv,
        "chdir": chdir,
    }


def _reserved(cache: ImageCache, ref: Any, job_id: str, progress: Any) -> CachedImage:
    """The image, pulled if need be and held for the job (reservations.py); pulled again if
    another job's pull evicted it before the hold was made."""
    hexa = ref.digest.partition(":")[2]
    for _ in range(3):
        cache.pull(ref, progress=progress)
        reserve(cache.locks, hexa, job_id)
        image = cache.get(ref.digest)
        if image is not None:
            return image
    raise ImageError(f"image {ref.digest} was evicted from this node's cache as it was pulled")
