"""The local backend: real processes on this machine, over the portal's virtual nodes.

`backend` (the protocol), `jobstore` (the files), `launch` (starting a supervisor), `shim`
(the supervisor itself, run by path with the standard library only).
"""

from __future__ import annotations

from scheduling.backends.local.backend import KILL_GRACE_S, SUPERVISOR_DIED, LocalBackend
from scheduling.backends.local.shim import BWRAP_MISSING

__all__ = ["BWRAP_MISSING", "KILL_GRACE_S", "SUPERVISOR_DIED", "LocalBackend"]
