"""The Prolog and Epilog of a Slurm node that runs jobs in images (docs/containers.md,
"Slurm notes"). Standard library only: run by slurmd as root, through the wrapper
docker/slurm/cluster.sh installs (`switchyard-prolog`, `switchyard-epilog`), with an
environment of Slurm's variables only.

Prolog, with `PrologFlags=Alloc,DeferBatch` on every node of the job before its batch script:
1. What it trusts: SLURM_JOB_ID and SLURM_JOB_UID (the job's owner can change its comment,
   name, work folder and even raise its time limit while it is pending). The work folder
   (`<workdir>/<key>`) only says where to look; the job is one of the portal's with an image
   only if `<workdir>/<key>.image.json` is root's, in a folder of root's no one else may
   write, and names the job's own account. Anything else: nothing to do, exit 0.
2. The pull runs as the cache's own account (`--account`, never the job's, never root):
   slurmnode/puller.py, told what it needs on its stdin; its progress lines become this node's
   pull file `<workdir>/<key>.pull.<node>.json` (root's, readable by the job's group), at
   most once a second.
3. Pulled: root raises the job's TimeLimit to its walltime plus the pull's minutes (an
   absolute value: a requeued job keeps it), so that the pull is not counted against the
   walltime, and marks the file ready with how the job runs in the image.
4. A pull that fails (registry down, image missing, access denied, timeout, a bad image) is
   the job's failure, never the node's: the file says why and the Prolog exits 0, so the
   node is not drained; the batch script then ends the job with that reason. Only a node
   that cannot pull at all (no cache, no account, the puller does not start, a cache it
   cannot write) exits NODE_FAULT, which the wrapper makes its own exit 1: slurmd drains
   it and requeues the job.

Epilog: the job's reservations in the cache are released (eviction may take its images
again); always exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from scheduling.backends.images.reservations import release

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_ID_RE = re.compile(r"^[0-9]{1,18}$")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# The one exit status the wrapper turns into a failed Prolog (slurmd drains the node): this
# node cannot pull at all. Any other (python missing, a crash) is not worth a drain.
NODE_FAULT = 3
_RUNUSER = shutil.which("runuser", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/runuser"
# The puller is a module of this package, imported from the code root given to the wrapper.
_RUN_PULLER = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from scheduling.backends.slurmnode import puller; sys.exit(puller.main(sys.argv[1:]))"
)


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="switchyard-prolog")
    parser.add_argument("--epilog", action="store_true")
    parser.add_argument("--cache", required=True, help="this node's image cache")
    parser.add_argument("--account", required=True, help="the cache's own account")
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--code", required=True, help="the folder holding `scheduling`")
    parser.add_argument("--timeout", type=float, default=600.0, help="one pull, seconds")
    parser.add_argument("--cap-mb", type=int, default=None)
    parser.add_argument("--max-unpacked-mb", type=int, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """0, or NODE_FAULT. Anything unforeseen is not the node's fault: 0 (an image job then
    fails for want of its pull file), never a drain of every node for a bug here."""
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except Exception:
        traceback.print_exc()
        return 0


def _main(argv: list[str]) -> int:
    args = _args(argv)
    job_id = os.environ.get("SLURM_JOB_ID", "")
    if not _ID_RE.match(job_id):
        return 0
    if args.epilog:
        try:
            release(Path(args.cache) / "locks", job_id)
        except OSError as exc:
            print(f"switchyard-epilog: job {job_id}: {exc}", file=sys.stderr)
        return 0
    job = _image_job(job_id)
    if job is None:
        return 0
    workdir, key, data = job
    node = os.environ.get("SLURMD_NODENAME", "")
    if not _NODE_RE.match(node):
        return 0
    out = PullFile(workdir / f"{key}.pull.{node}.json", job_id, _job_gid())
    return pull(args, data, out)


def _image_job(job_id: str) -> tuple[Path, str, dict[str, Any]] | None:
    """The job's workdir, key and image file, if it is a portal's job with an image."""
    hint = os.environ.get("SLURM_JOB_WORK_DIR", "")
    folder = Path(hint)
    key, workdir = folder.name, folder.parent
    if not hint.startswith("/") or not _KEY_RE.match(key):
        return None
    path = workdir / f"{key}.image.json"
    try:
        if not _roots(os.lstat(workdir), folder=True):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # no image: nothing to pull
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not _roots(st, folder=False) or st.st_nlink != 1:
            return None
        try:
            data = json.loads(fh.read(1 << 20))
        except ValueError:
            return None
    if not isinstance(data, dict) or data.get("key") != key:
        return None
    if str(data.get("uid")) != os.environ.get("SLURM_JOB_UID"):
        print(f"switchyard-prolog: job {job_id}: {path} is another account's", file=sys.stderr)
        return None
    return workdir, key, data


def _roots(st: os.stat_result, *, folder: bool) -> bool:
    kind = stat.S_ISDIR(st.st_mode) if folder else stat.S_ISREG(st.st_mode)
    return kind and st.st_uid == 0 and not st.st_mode & 0o022


def _job_gid() -> int:
    gid = os.environ.get("SLURM_JOB_GID", "")
    return int(gid) if gid.isdigit() and int(gid) != 0 else 65534


class PullFile:
    """This node's pull file, replaced whole at each write (root's, 0640, the job's group)."""

    def __init__(self, path: Path, job_id: str, gid: int) -> None:
        self.path, self.job_id, self.gid = path, job_id, gid
        self.written = 0.0

    def write(self, **fields: Any) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o640)
        with os.fdopen(fd, "w") as fh:
            os.fchown(fh.fileno(), 0, self.gid)
            os.fchmod(fh.fileno(), 0o640)  # whatever slurmd's umask
            json.dump({"job_id": self.job_id, **fields}, fh)
        os.rename(tmp, self.path)
        self.written = time.monotonic()


def pull(args: argparse.Namespace, data: dict[str, Any], out: PullFile) -> int:
    """Pull the job's image as the cache's account; write the pull file as it goes."""
    started = time.monotonic()
    out.write(state="pulling", done=0, total=None, seconds=0.0)
    request = {k: data.get(k) for k in ("image", "digest", "command", "script", "given", "session")}
    request.update(needed=data.get("needed"), work=data.get("work"), job_id=out.job_id)
    cache = Path(args.cache)
    puller = [args.python, "-I", "-c", _RUN_PULLER, args.code, "--cache", str(cache)]
    puller += ["--timeout", str(args.timeout)]
    if args.cap_mb:
        puller += ["--cap-mb", str(args.cap_mb)]
    if args.max_unpacked_mb:
        puller += ["--max-unpacked-mb", str(args.max_unpacked_mb)]
    env = {"PATH": SAFE_PATH, "LANG": "C.UTF-8", "HOME": str(cache)}
    try:
        if not cache.is_dir():
            raise OSError(f"the image cache {cache} does not exist")
        proc = subprocess.Popen(
            [_RUNUSER, "-u", args.account, "--", *puller],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd="/",
        )
    except OSError as exc:
        out.write(state="failed", reason=f"this node cannot pull images: {exc}", seconds=0.0)
        return NODE_FAULT  # slurmd drains the node and the job goes elsewhere
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(request).encode())
    proc.stdin.close()
    result: dict[str, Any] = {}
    # The puller's own timeouts bound the pull and the unpack; this bounds the puller, well
    # inside the site's PrologEpilogTimeout (which would drain the node).
    watchdog = threading.Timer(args.timeout * 2 + 60, proc.kill)
    watchdog.start()
    for line in proc.stdout:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict):
            continue
        if message.get("state") == "progress":
            if time.monotonic() - out.written >= 1.0:
                seconds = round(time.monotonic() - started, 1)
                out.write(
                    state="pulling",
                    done=message.get("done"),
                    total=message.get("total"),
                    seconds=seconds,
                )
        else:
            result = message
    rc = proc.wait()
    watchdog.cancel()
    seconds = round(time.monotonic() - started, 3)
    if result.get("state") != "ready":
        reason = result.get("reason") or f"the image puller ended without an answer ({rc})"
        out.write(
            state="failed",
            reason=str(reason),
            seconds=seconds,
            done=result.get("done"),
            total=result.get("total"),
        )
        # The job's failure, not the node's: never drained for a registry. A cache that
        # cannot be written is the node's.
        return NODE_FAULT if result.get("node") == 1 else 0
    pulled = bool(result.get("pulled"))
    if pulled and data.get("walltime_min"):
        extend(out.job_id, int(data["walltime_min"]), seconds)
    chdir = data.get("chdir") or result.get("chdir")
    out.write(
        state="ready",
        done=result.get("total"),
        total=result.get("total"),
        seconds=seconds if pulled else 0.0,
        bytes=result.get("pull_bytes", 0) if pulled else 0,
        digest=result.get("digest"),
        rootfs=result.get("rootfs"),
        system=result.get("system"),
        env=result.get("env"),
        argv=result.get("argv"),
        chdir=chdir,
    )
    return 0


def extend(job_id: str, walltime_min: int, seconds: float) -> None:
    """The job's TimeLimit: its walltime plus the pull's minutes, so the pull is not counted
    against it (only root may raise a running job's limit)."""
    scontrol = shutil.which("scontrol", path=SAFE_PATH) or "scontrol"
    limit = walltime_min + math.ceil(seconds / 60)
    env = {"PATH": SAFE_PATH, "SLURM_CONF": os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf")}
    done = subprocess.run(
        [scontrol, "update", f"JobId={job_id}", f"TimeLimit={limit}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        print(f"switchyard-prolog: TimeLimit of {job_id}: {done.stderr.strip()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
