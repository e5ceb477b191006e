"""A Slurm job in its image, on the portal's side (docs/containers.md, "Slurm notes").

Before sbatch the portal writes `<workdir>/<key>.image.json` beside the job's folder: root's,
0600, what the node's Prolog (slurm/prolog.py) needs to pull the image and to say how the
job runs in it (the digest, the account the job runs as, its walltime, its command, the paths
its sandbox mounts). The Prolog trusts nothing else of the job but its id and account.

On each node the Prolog writes `<workdir>/<key>.pull.<node>.json` (root's, readable by the
job's group): pulling with its progress, then ready with the sandbox's system binds over the
image and how to run the command, or failed with a reason. The batch script reads this node's
file before its sandbox (`script_lines`): ready → the sandbox is built over the image; failed
or missing → the script exits IMAGE_EXIT and the portal shows the file's reason. A file not
root's, not a regular file, or naming another job is ignored by both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shlex
import stat
from pathlib import Path
from typing import Any

from scheduling.backends.base import ImagePull, Job, JobState, SubmitRequest

IMAGE_EXIT = 67
MAX_PULL_FILE = 8 << 20
# Where the sandbox's argv has these, the script's own variables (set by READER) are
# expanded: the image's system binds; the starting folder followed by the image's Env as
# bwrap's --setenv options (bwrap reads its options in order, so they may follow --chdir's
# value); the command in the image.
SHELL_SYSTEM = '"${switchyard_system[@]}"'
SHELL_CHDIR = '"$switchyard_chdir" "${switchyard_image_env[@]}"'
SHELL_ARGV = '"${switchyard_argv[@]}"'
SHELL_WORDS = frozenset({SHELL_SYSTEM, SHELL_CHDIR, SHELL_ARGV})

# Run by the batch script (python3 -I -S, standard library only): this node's pull file,
# checked, as shell assignments (every value quoted), or the reason it cannot run and 67.
READER = r"""
import json, os, shlex, stat, sys
path, job = sys.argv[1], sys.argv[2]
def fail(why):
    print("switchyard: " + why, file=sys.stderr)
    sys.exit(67)
try:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
except OSError:
    fail("this node's Prolog did not pull the job's image (no %s)" % path)
with os.fdopen(fd, "rb") as f:
    st = os.fstat(f.fileno())
    if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
        fail("the pull file %s is not one the Prolog wrote" % path)
    data = json.loads(f.read(8 << 20))
if str(data.get("job_id")) != job:
    fail("the pull file %s is another job's" % path)
if data.get("state") != "ready":
    fail(str(data.get("reason") or "the job's image could not be pulled"))
q = lambda xs: " ".join(shlex.quote(str(x)) for x in xs)
env = [w for k, v in data["env"] for w in ("--setenv", k, v)]
print("switchyard_system=(%s)" % q(data["system"]))
print("switchyard_image_env=(%s)" % q(env))
print("switchyard_argv=(%s)" % q(data["argv"]))
print("switchyard_chdir=%s" % shlex.quote(data["chdir"]))
"""


def image_path(workdir: Path, key: str) -> Path:
    return workdir / f"{key}.image.json"


def pull_path(workdir: Path, key: str, node: str) -> Path:
    return workdir / f"{key}.pull.{node}.json"


def write_image_file(
    workdir: Path,
    request: SubmitRequest,
    uid: int,
    *,
    needed: list[str],
    work: str,
    chdir: str | None,
    script: str | None,
) -> None:
    """The job's image file (see the module docstring), made afresh, root's and 0600."""
    spec = request.spec
    walltime = math.ceil(spec.walltime_s / 60) if spec.walltime_s else None
    data = {
        "key": request.key,
        "uid": uid,
        "image": spec.image,
        "digest": spec.image_digest,
        "walltime_min": max(1, walltime) if walltime else None,
        "command": list(spec.command) if spec.command is not None else None,
        "script": script,
        "given": sorted({name for name, _ in (*spec.env, *spec.secret_env)}),
        "needed": needed,
        "work": work,
        "chdir": chdir,
        # A live sandbox's agent runs with the image's python3: the pull fails without one.
        "session": spec.session_idle_s is not None,
    }
    write_image_data(workdir, request.key, data)


def write_image_data(workdir: Path, key: str, data: dict[str, Any]) -> None:
    """An image file with these fields (write_image_file's), made afresh, root's and 0600: a
    task's job, or a pre-pull job (slurm/prepull.py)."""
    path = image_path(workdir, key)
    tmp = path.with_name(f".{path.name}.tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    os.rename(tmp, path)


def script_lines(workdir: Path, key: str) -> list[str]:
    """The batch script's lines that read this node's pull file (READER) and set the
    variables the SHELL_* words expand, or end the job with IMAGE_EXIT."""
    where = shlex.quote(f"{workdir}/{key}.pull.")
    return [
        "command -v python3 >/dev/null || { echo 'switchyard: python3 is not installed on this "
        f"node: a job in an image cannot start' >&2; exit {IMAGE_EXIT}; }}",
        f'switchyard_image=$(cd / && python3 -I -S -c {shlex.quote(READER)} {where}"$SLURMD_NODENAME".json '
        f'"$SLURM_JOB_ID") || exit {IMAGE_EXIT}',
        'eval "$switchyard_image"',
    ]


def read_pulls(workdir: Path, key: str, job_id: str) -> list[dict[str, Any]]:
    """The pull files of job `job_id` (`<jobid>:<key>`'s id), one a node: only root's regular
    files that name this job."""
    found = []
    for path in sorted(workdir.glob(f"{key}.pull.*.json")):
        data = _read_root_file(path)
        if data is not None and str(data.get("job_id")) == job_id:
            found.append(data)
    return found


def _read_root_file(path: Path) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0:
            return None
        try:
            data = json.loads(fh.read(MAX_PULL_FILE))
        except ValueError:
            return None
    return data if isinstance(data, dict) else None


def pull_of(pulls: list[dict[str, Any]]) -> ImagePull | None:
    """The job's pull over its nodes: the slowest node's (the least done, the longest)."""
    if not pulls:
        return None
    done = min(int(p.get("done") or 0) for p in pulls)
    totals = [p.get("total") for p in pulls]
    total = None if any(not t for t in totals) else max(int(t) for t in totals if t)
    return ImagePull(
        done_bytes=done,
        total_bytes=total,
        seconds=max(float(p.get("seconds") or 0.0) for p in pulls),
        finished=all(p.get("state") in ("ready", "failed") for p in pulls),
    )


def pulling_reason(pull: ImagePull | None) -> str:
    if pull is None:
        return "pulling image"
    if not pull.total_bytes:
        return f"pulling image ({pull.done_bytes / 1e6:.0f} MB)"
    percent = min(100, math.floor(100 * pull.done_bytes / pull.total_bytes))
    return f"pulling image {percent}% ({pull.done_bytes / 1e6:.0f}/{pull.total_bytes / 1e6:.0f} MB)"


def with_pull(workdir: Path, job: Job, *, in_prolog: bool) -> Job:
    """`job` with its image's pull (Job.pull) when it has an image: "pulling image N%" while
    its Prolog runs (`in_prolog`), and the failed pull's reason in place of its exit code."""
    job_id, _, key = job.backend_id.partition(":")
    if not image_path(workdir, key).exists():
        return job
    pulls = read_pulls(workdir, key, job_id)
    pull = pull_of(pulls)
    if in_prolog and job.state is JobState.RUNNING:
        return dataclasses.replace(job, pull=pull, reason=pulling_reason(pull))
    if job.state is JobState.FAILED and job.exit_code == IMAGE_EXIT:
        failed = [p for p in pulls if p.get("state") == "failed"]
        reason = (
            str(failed[0].get("reason") or "")
            if failed
            else "the node's Prolog did not pull the job's image (docs/containers.md)"
        )
        return dataclasses.replace(job, pull=pull, reason=reason)
    return dataclasses.replace(job, pull=pull) if pull is not None else job
