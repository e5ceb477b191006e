"""The Slurm backend: `backend` (the protocol over Slurm's commands), `commands` (running
them), `parse` (reading their answers), `config` (slurm.conf and friends from the site)."""

from __future__ import annotations

from scheduling.backends.slurm.backend import SlurmBackend
from scheduling.backends.slurm.commands import CommandRunner

__all__ = ["CommandRunner", "SlurmBackend"]
