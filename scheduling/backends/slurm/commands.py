"""Running Slurm's commands: argv lists (never a shell), one config, errors sorted.

A command that cannot reach the controller raises BackendUnavailable (the engine retries);
any other failure raises BackendError with what the command said.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scheduling.backends.base import BackendError, BackendUnavailable

_UNREACHABLE_MARKERS = (
    "Unable to contact slurm controller",
    "Slurm controller not responding",
    "Socket timed out",
    "Connection refused",
    "Unable to establish connection",
    "slurm_persist_conn_open",
    "Zero Bytes were transmitted or received",
    "Slurmctld is not responding",
)


@dataclass
class CommandRunner:
    """Runs a Slurm command as an argv list (never through a shell) against one config."""

    slurm_conf: str | None = None
    timeout_s: float = 20.0
    bin_dir: str | None = None
    calls: list[tuple[str, ...]] = field(default_factory=list)

    def __call__(self, argv: Sequence[str], *, stdin: str | None = None) -> str:
        argv = list(argv)
        if self.bin_dir:
            argv[0] = os.path.join(self.bin_dir, argv[0])
        # Epoch seconds in sacct's text output, whatever the host's time zone.
        # Times given to Slurm are read in UTC (TZ), whatever the host's or Django's zone.
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "SLURM_TIME_FORMAT": "%s",
            "TZ": "UTC",
        }
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        self.calls.append(tuple(argv))
        try:
            done = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise BackendUnavailable(f"{argv[0]} timed out after {self.timeout_s:g}s") from exc
        except FileNotFoundError as exc:
            raise BackendUnavailable(f"{argv[0]} is not installed") from exc
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip()
            if any(marker in message for marker in _UNREACHABLE_MARKERS):
                raise BackendUnavailable(message.splitlines()[-1] if message else "unreachable")
            raise BackendError(f"{Path(argv[0]).name} failed: {message or done.returncode}")
        return done.stdout

    def count(self, command: str) -> int:
        return sum(1 for argv in self.calls if Path(argv[0]).name == command)
