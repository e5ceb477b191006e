"""A Slurm job's own folder under the backend's workdir, made on the portal's side before
sbatch: its account's alone, with its script and its usage file."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable
from pathlib import Path

from scheduling.backends.base import SubmitRequest
from scheduling.backends.slurm.watch import prepare_usage_file


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
