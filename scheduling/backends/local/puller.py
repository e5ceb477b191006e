"""The puller of one image into a local backend's image cache: `main([_, params])`.

The backend starts one per image a stored job waits for (pulls.py), detached, with the
image's pull lock (`<root>/pulls/<hex>.lock`) already held for it: while this process lives
no other puller of that image starts, and once it ends (or dies) the lock is free. It pulls
by digest into the cache (the cache's own lock makes concurrent pulls of one image, from any
process, one pull), writing how far it is to `<root>/pulls/<hex>.json`, which the backend
reads as it polls: the jobs waiting for the image show "pulling image N%", then start once
it is here, or fail with the reason it wrote. Nothing here waits on the backend's root-wide
lock, and the backend never waits on a registry.

It runs with the site's environment only (PATH, LANG, and the proxy and registry
credentials pulls.PASSED_ENV names), as the worker's account (docs/security.md,
"Images"), without Django: the cache's settings come in `params`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from scheduling.backends.images import ImageCache, ImageError, Skopeo
from scheduling.decisions.images import parse_image_ref

# Seconds between two writes of the progress file.
PROGRESS_EVERY_S = 0.5


def write_status(path: str, status: dict) -> None:
    """Replace the status file whole (readers see the old one or the new one)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(status))
    os.replace(tmp, path)


def pull(params: dict) -> dict:
    """Pull the image `params` names; the final status to write."""
    started = float(params["started"])
    status_path = params["status"]
    timeout = float(params["timeout_s"])
    cache = ImageCache(
        params["cache"],
        cap_bytes=params.get("cap_bytes"),
        max_unpacked_bytes=params.get("max_unpacked_bytes"),
        max_pull_bytes=params.get("max_pull_bytes"),
        skopeo=Skopeo(timeout_s=timeout),
        unpack_timeout_s=timeout,
    )
    name = params["image"]
    last = 0.0

    def progress(done: int, total: int) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= PROGRESS_EVERY_S or (total and done >= total):
            last = now
            write_status(
                status_path,
                {"started": started, "finished": False, "done": done, "total": total or None},
            )

    try:
        ref = parse_image_ref(name, default_registry="localhost").with_digest(params["digest"])
        image = cache.pull(ref, progress=progress, lock_timeout_s=timeout)
    except ImageError as exc:
        error = f"pulling image {name} failed: {exc.reason}"
    except Exception:  # a bug or a full disk: the jobs fail saying so, not hang
        # The detail (a path of the node's cache, say) goes to the log, not to the jobs.
        logging.exception("pulling %s failed", name)
        error = f"pulling image {name} failed on this node; the worker's log says why"
    else:
        return {
            "started": started,
            "finished": True,
            "ok": True,
            "ended": time.time(),
            "done": image.image_bytes,
            "total": image.image_bytes,
        }
    return {"started": started, "finished": True, "ok": False, "ended": time.time(), "error": error}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: puller.py <params as JSON>", file=sys.stderr)
        return 2
    # What skopeo answered goes to stderr (the image's .err file beside its status), never
    # into the jobs' reasons.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    params = json.loads(argv[1])
    write_status(params["status"], pull(params))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
