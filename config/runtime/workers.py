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
    hostname: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """`celery -A config worker` reading both queues; `beat_schedule` also runs beat in it
    (`-B`: tests and benches only; a beat forked from the worker closes the files it inherits,
    which prometheus_client's multiprocess mode then fails on: `manage.py up` and a deployment
    run `beat_argv` on its own).

    Gossip and mingle are off: the portal uses neither (no remote revokes, no worker
    events); without them a worker starts a second sooner, and a broker restart leaves no
    broadcast consumers to tear down (docs/deployment.md, "Restarts"). `quiet` also turns
    off the heartbeat: a test's worker is alone.

    `hostname` names the worker (`name@host`; Celery's default is
    `celery@<this host>`): several workers, on one host or many, share the broker's queues
    and the database (docs/deployment.md). Every beat but one waits (config/runtime/beat.py).
    """
    argv = [
        python,
        "-m",
        "celery",
        "-A",
        "config",
        "worker",
        f"--loglevel={loglevel}",
        f"--concurrency={concurrency}",
        "--without-gossip",
        "--without-mingle",
    ]
    if hostname is not None:
        argv += ["-n", hostname]
    if beat_schedule is not None:
        argv += ["-B", "-s", str(beat_schedule)]
    if quiet:
        argv += ["--without-heartbeat"]
    return argv


def beat_argv(
    *, schedule: Path | str, loglevel: str = "WARNING", python: str = sys.executable
) -> list[str]:
    """`celery -A config beat` on its own (a deployment's beat service): the periodic passes,
    sent only while it holds the site's beat lock (config/runtime/beat.py)."""
    return [
        python,
        "-m",
        "celery",
        "-A",
        "config",
        "beat",
        "-s",
        str(schedule),
        f"--loglevel={loglevel}",
    ]
