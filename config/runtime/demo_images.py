"""`make run`'s images (docs/containers.md, "Try it"): the project's own registry on this
machine, started by docker/images/registry.sh, with the demo catalogue's images, and the
portal pointed at it, so that a newcomer's `image: demo/python:3` runs with nothing to set up.

A registry is used rather than importing an image straight into the local backend's cache:
a submission resolves a tag to a digest by asking the registry, and the Slurm nodes pull from
one too; with a registry the demo runs exactly the path a site's does.

Whatever goes wrong here (not root, no Debian mirror, a port taken) leaves the portal
starting without images: it says so, and every `image` is refused with the reason.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Protocol

from django.conf import settings

SCRIPT = Path(settings.BASE_DIR) / "docker" / "images" / "registry.sh"
# The last line `registry.sh start` prints: the export its clients need.
_EXPORT = re.compile(r"export SWITCHYARD_TEST_REGISTRY=(\S+)\s*$")
START_TIMEOUT_S = 900


class Out(Protocol):
    """A command's stdout (Django's OutputWrapper) or a text stream."""

    def write(self, msg: str) -> object: ...

    def flush(self) -> object: ...


def start_demo_registry(out: Out, *, script: Path = SCRIPT) -> str | None:
    """Start the registry (idempotent: seconds once it has run) and point this process and
    the ones it starts at it; its address, or None with a warning on `out`."""
    if settings.SWITCHYARD_IMAGE_REGISTRIES:
        out.write(
            f"Images: this site's registries ({', '.join(settings.SWITCHYARD_IMAGE_REGISTRIES)});"
            " the demo registry is not started.\n"
        )
        return None
    out.write(
        "Images: starting the demo registry (docker/images/registry.sh start). The first time "
        "it installs Debian's docker-registry, skopeo, umoci, mmdebstrap and busybox-static and "
        "builds the demo images from Debian packages: a minute or so.\n"
    )
    out.flush()
    try:
        done = subprocess.run(
            ["bash", str(script), "start"],
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        _refused(out, f"{script} start did not finish: {exc}")
        return None
    lines = (done.stdout + done.stderr).strip().splitlines()
    for line in lines:
        out.write(f"  {line}\n")
    found = _EXPORT.search(lines[-1]) if lines else None
    if done.returncode != 0 or found is None:
        _refused(out, f"{script} start exited {done.returncode}")
        return None
    address = found.group(1)
    # The worker and the web server read their settings from this environment.
    os.environ["SWITCHYARD_IMAGE_REGISTRIES"] = address
    os.environ["SWITCHYARD_IMAGE_REGISTRY"] = address
    settings.SWITCHYARD_IMAGE_REGISTRIES = [address]
    settings.SWITCHYARD_IMAGE_REGISTRY = address
    out.write(f"Images: the demo registry is {address}; try `image: demo/python:3`.\n")
    return address


def _refused(out: Out, why: str) -> None:
    out.write(
        f"WARNING: no demo images: {why}. The portal starts without them: every task's "
        "`image` is refused until a registry is configured (docs/containers.md). Run "
        "`sudo docker/images/registry.sh start` and `make run` again to have them.\n"
    )
