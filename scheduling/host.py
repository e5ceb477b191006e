"""What the portal needs to know of the machine the local backend runs jobs on (this one).

The process limits of local queues depend on it (decisions/processes.py): the queue form,
the admin console and `manage.py check` refuse what cannot hold here.
"""

from __future__ import annotations

from django.conf import settings

# The kernel's default where /proc cannot be read.
DEFAULT_PID_MAX = 32768


def pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max", encoding="ascii") as f:
            return int(f.read())
    except (OSError, ValueError):
        return DEFAULT_PID_MAX


def is_local(alias: str) -> bool:
    """Whether the backend `alias` runs its jobs as processes on this machine.

    Read from the alias's settings (RUNS_ON_THIS_HOST), so that models and checks load no
    backend; the engine refuses to build a backend whose class says otherwise
    (scheduling/engine/registry.py).
    """
    return settings.COMPUTE_BACKENDS.get(alias, {}).get("RUNS_ON_THIS_HOST", False) is True
