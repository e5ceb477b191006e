"""A Slurm job's own folder under the backend's workdir, made on the portal's side before
sbatch: its account's alone, with its script and its usage file; and the reason its script
left there when an input could not be linked."""

from __future__ import annotations

import dataclasses
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

from scheduling.backends.base import Job, JobState, SubmitRequest
from scheduling.backends.slurm.watch import prepare_usage_file
from scheduling.backends.storage import INPUT_EXIT, INPUT_REASON, is_prelude_reason


def prepare_job_folder(
    workdir: Path,
    request: SubmitRequest,
    entry: pwd.struct_passwd,
    usage_path: Callable[[str], Path],
) -> None:
    """The job's folder, its account's alone; the folders above it passable (o+x)."""
    workdir.mkdir(parents=True, exist_ok=True)
    workdir.chmod(0o711)
    path = workdir / request.key
    path.mkdir(exist_ok=True)
    if request.spec.script is not None:
        script = path / "script.sh"
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o500)
        with os.fdopen(fd, "w") as fh:
            fh.write(request.spec.script)
        os.chown(script, entry.pw_uid, entry.pw_gid)
    os.chown(path, entry.pw_uid, entry.pw_gid)
    path.chmod(0o700)
    prepare_usage_file(usage_path(request.key), entry.pw_uid, entry.pw_gid)


def with_input_reason(workdir: Path, job: Job) -> Job:
    """`job`, with the reason its script wrote when it failed before its sandbox (an input,
    its working folder: the reason names it) in place of "exit code 66". The file is the job
    account's: opened without following a link, a regular file's first bytes only, and only
    a reason of those forms (`is_prelude_reason`)."""
    if job.state is not JobState.FAILED or job.exit_code != INPUT_EXIT:
        return job
    path = workdir / job.backend_id.partition(":")[2] / INPUT_REASON
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return job
    try:
        text = os.read(fd, 1000) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    reason = text.decode("utf-8", "replace").strip()
    if not is_prelude_reason(reason):
        return job
    return dataclasses.replace(job, reason=reason)
