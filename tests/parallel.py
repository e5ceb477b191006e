"""The suite on several pytest-xdist workers (`make test` runs it on two, see the Makefile).

Most of the Slurm tests' time is waiting on the cluster (a walltime to pass, a daemon to come
back), so they run on one worker, one after another (the cluster is shared: each test expects
every node), while the other workers run the rest. The tests marked `heavy` (hundreds of
tasks through real workers) run in the same line, so that none loads the machine beside a
Slurm test, and so do those marked `unix_groups` (they change groups a Slurm job needs). A
worker that is done with them takes tests of the rest.

pytest-django already gives each worker a test database of its own (`test_<name>_gw0`, …).
This gives each worker the two other things the tests assume are theirs alone:
- a var folder (`$SWITCHYARD_VAR_DIR/gw0`, …): the demo site's storage areas, the job roots,
  the static files, the broker folder;
- a Redis database (the configured one, then the ones below it): the integration tests'
  Celery workers take their messages from its queue, and each test purges it.
Both are read from the environment when Django's settings load, so this module is loaded
with `-p` (pyproject.toml) and sets them before pytest-django loads the settings; the
processes a test starts inherit them. Without xdist it changes nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent
REDIS_DATABASES = 16  # redis-server's default `databases`
SLURM_GROUP = "slurm"


def worker_number() -> int | None:
    """0 for xdist's worker gw0, 1 for gw1, …; None outside xdist (or in its controller)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name.removeprefix("gw")) if name.startswith("gw") else None


def worker_redis_url(url: str, number: int) -> str:
    """The URL of the configured Redis with the database `number` below the configured one
    (above it where there are not enough below)."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    database = base - number if base >= number else base + number
    if not 0 <= database < REDIS_DATABASES:
        raise pytest.UsageError(f"REDIS_URL: no Redis database left for xdist worker {number}")
    return urlunsplit(parts._replace(path=f"/{database}"))


def worker_var_dir(base: Path, name: str) -> Path:
    """`base/<worker>`, empty, with the base's secret key (the settings read it from there).

    Emptied as a fresh checkout has it: what an earlier run left there would be in the way
    of this one (a task's folder in the demo storage areas is named by the task's id, and a
    fresh test database hands the same ids out again)."""
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o711)  # the jobs' accounts pass through it to their folders
    var = base / name
    shutil.rmtree(var, ignore_errors=True)
    var.mkdir(mode=0o711, exist_ok=True)
    key = base / "secret-key"
    if key.is_file():
        shutil.copyfile(key, var / "secret-key")
        (var / "secret-key").chmod(0o600)
    return var


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args) -> None:
    # tryfirst: before pytest-django's, which loads the settings.
    number = worker_number()
    if number is None:
        return
    base = Path(os.environ.get("SWITCHYARD_VAR_DIR") or ROOT / "var")
    os.environ["SWITCHYARD_VAR_DIR"] = str(worker_var_dir(base, f"gw{number}"))
    if redis_url := os.environ.get("REDIS_URL"):
        os.environ["REDIS_URL"] = worker_redis_url(redis_url, number)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items) -> None:
    # tryfirst: before xdist's, which reads the groups (`--dist loadgroup`).
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        # A heavy test beside a Slurm test would stretch the Slurm test's timings (how soon
        # a cancelled job's room is given again, say): it runs in their line instead.
        # A test marked `unix_groups` takes out of every project's group the accounts its
        # own database's members do not run as: beside a Slurm test (whose nodes give a job
        # its groups from /etc/group) it would take that job's account out of its project.
        if any(item.get_closest_marker(m) for m in ("slurm", "heavy", "unix_groups")):
            item.add_marker(pytest.mark.xdist_group(SLURM_GROUP))
