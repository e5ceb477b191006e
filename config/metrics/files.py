"""The folders through which a role's processes share their samples (prometheus_client's
multiprocess mode): one per role and host under `SWITCHYARD_METRICS_DIR`, emptied when the
role starts, as the library asks (a dead process's files would otherwise be read again).

`/metrics` reads them all, so the web server also reports the worker's and beat's samples
when they share the var folder (one machine, or one volume). Django-free: the launchers call
it before any process that records starts.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

# prometheus_client picks its multiprocess mode from this variable when it is first imported.
ENV = "PROMETHEUS_MULTIPROC_DIR"


def role_dir(root: Path, role: str) -> Path:
    return root / f"{role}-{socket.gethostname()}"


def fresh_role_dir(root: Path, role: str) -> Path:
    """The role's folder on this host, emptied: its processes start counting from zero."""
    folder = role_dir(root, role)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, mode=0o700)
    return folder


def role_env(root: Path, role: str, *, enabled: bool) -> dict[str, str]:
    """What a launcher adds to the environment of a role it starts: its fresh folder, or
    nothing when metrics are off (then prometheus_client is never asked to write files)."""
    return {ENV: str(fresh_role_dir(root, role))} if enabled else {}


def all_role_dirs(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted(path for path in root.iterdir() if path.is_dir())
