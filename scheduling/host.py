"""What the portal needs to know of the machine the local backend runs jobs on (this one).

The process limits of local queues depend on it (decisions/processes.py): the queue form,
the admin console and `manage.py check` refuse what cannot hold here.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.module_loading import import_string

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

    Asked of the class named in the settings, so that this module (read by models and checks)
    imports no backend.
    """
    path = settings.COMPUTE_BACKENDS.get(alias, {}).get("BACKEND")
    if not path:
        return False
    try:
        return getattr(import_string(path), "runs_on_this_host", False) is True
    except ImportError:
        return False
