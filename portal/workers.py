"""The one Celery worker command line: `manage.py up`, the integration tests and the benches
all start workers with it, so what is tested and measured is what runs."""

from __future__ import annotations

import sys
from pathlib import Path


def worker_argv(
    *,
    beat_schedule: Path | str | None,
    loglevel: str = "WARNING",
    concurrency: int = 2,
    quiet: bool = False,
    python: str = sys.executable,
) -> list[str]:
    """`celery -A portal worker` reading both queues; `beat_schedule` also runs beat in it.

    `quiet` turns off gossip, mingle and heartbeat: a test's worker is alone and starts
    faster without them.
    """
    argv = [
        python,
        "-m",
        "celery",
        "-A",
        "portal",
        "worker",
        f"--loglevel={loglevel}",
        f"--concurrency={concurrency}",
    ]
    if beat_schedule is not None:
        argv += ["-B", "-s", str(beat_schedule)]
    if quiet:
        argv += ["--without-gossip", "--without-mingle", "--without-heartbeat"]
    return argv
