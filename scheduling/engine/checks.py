"""`manage.py check` of what only the backends can tell: whether a local backend's jobs get
the control groups its settings ask for (docs/security.md, "Limits")."""

from __future__ import annotations

import os

from django.conf import settings
from django.core import checks

from scheduling import host
from scheduling.backends.local import cgroup


@checks.register(checks.Tags.compatibility)
def local_job_cgroups(app_configs=None, **kwargs) -> list[checks.CheckMessage]:
    """Each local job's control group (docs/security.md, "Limits"): a folder configured for
    them that cannot hold them is an error; a root worker on `auto` that cannot make them runs
    its jobs under the watchdog alone, and a host whose cgroup2 lacks favordynmods makes each
    start wait, which are worth a warning."""
    found: list[checks.CheckMessage] = []
    for alias, config in settings.COMPUTE_BACKENDS.items():
        options = config.get("OPTIONS", {})
        if not host.is_local(alias) or "root" not in options:
            continue
        setting = options.get("cgroups", "auto")
        where, why = cgroup.locate(setting, options["root"])
        if where is not None and cgroup.lacks_dynmods():
            found.append(
                checks.Warning(
                    f"backend {alias}: each job's start waits for an RCU grace period as its "
                    "first process joins its control group, and no process on the host may "
                    "fork meanwhile: mount cgroup2 with favordynmods",
                    hint="docker/cgroup-dynmods.sh (docs/security.md, Limits)",
                    id="switchyard.W105",
                )
            )
        if where is not None or setting == "off":
            continue
        if setting != "auto":
            found.append(
                checks.Error(f"SWITCHYARD_JOB_CGROUP: {why}; got {setting}", id="switchyard.E104")
            )
        elif os.geteuid() == 0:
            found.append(
                checks.Warning(
                    f"backend {alias}: jobs get no control group ({why}), so the watchdog "
                    "alone bounds their memory, and nothing their CPUs",
                    hint="docs/security.md, Limits: SWITCHYARD_JOB_CGROUP",
                    id="switchyard.W104",
                )
            )
    return found
