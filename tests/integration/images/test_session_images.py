"""Live sandboxes over an image's root file system on the local backend (docs/sandboxes.md):
the agent runs under the image's own python3, an image without one is refused naming it, and
a warm pool of an image hands out sandboxes of that image."""

from __future__ import annotations

import argparse
import dataclasses
import re
import time

import pytest

from scheduling.backends.base import ExecRequest, JobState, WarmSpec
from scheduling.backends.imagebox import CannotRun
from scheduling.backends.images import Skopeo
from scheduling.backends.slurmnode import puller
from scheduling.decisions.images import parse_image_ref
from tests.unit.scheduling.local_backend.helpers import finished, running


def as_session(request):
    spec = dataclasses.replace(request.spec, session_idle_s=120, walltime_s=600)
    return dataclasses.replace(request, spec=spec, type="sandbox")


def test_a_session_in_an_image_runs_its_agent_with_the_images_python(make, in_image):
    backend = make()
    backend.submit(as_session(in_image("switchyard/python:3", "in-python", memory_mib=256)))
    job = running(backend, "in-python", timeout=120)
    assert job.state is JobState.RUNNING, job.reason
    # The image has python3 and no shell: the commands are Python's.
    probe = "import os; print(open('/etc/os-release').read().split()[0]); print(os.getcwd())"
    result = backend.exec_in("in-python", ExecRequest(argv=("python3", "-c", probe)))
    assert result.exit_code == 0, result.stderr
    assert result.stdout.decode().splitlines()[1] == "/home/sandbox"
    assert (
        "switchyard-python" in backend.get_file("in-python", "/etc/os-release", limit=4096).decode()
    )
    backend.put_file("in-python", "f", b"x\n")
    assert backend.get_file("in-python", "f", limit=10) == b"x\n"


def test_an_image_without_python3_is_refused_naming_it(make, in_image):
    backend = make()
    backend.submit(as_session(in_image("switchyard/base:1", "no-python", memory_mib=256)))
    job = finished(backend, "no-python", timeout=120)
    assert job.state is JobState.FAILED
    assert "switchyard/base:1" in job.reason and "no python3" in job.reason


def test_a_warm_pool_of_an_image_hands_out_sandboxes_of_that_image(make, in_image):
    backend = make()
    first = as_session(in_image("switchyard/python:3", "pulls-it", memory_mib=256))
    backend.submit(first)  # a warm pool never pulls: a session pulls the image first
    running(backend, "pulls-it", timeout=120)
    template = first.spec.image or ""  # as the portal names it: the reference used
    backend.keep_warm([WarmSpec(template=template, cpus=1, memory_mb=256, count=1)])
    end = time.monotonic() + 30
    while backend.keep_warm([WarmSpec(template, 1, 256, 1)])[0].ready < 1:
        if time.monotonic() > end:
            pytest.fail("the image's warm sandbox did not start")
        time.sleep(0.05)
    claimed = backend.claim_warm(
        as_session(in_image("switchyard/python:3", "claimed", memory_mib=256))
    )
    assert claimed is not None and claimed.state is JobState.RUNNING
    os_release = backend.get_file("claimed", "/etc/os-release", limit=4096).decode()
    assert "ID=switchyard-python" in os_release


def test_a_slurm_nodes_pull_for_a_session_refuses_an_image_without_python3(job_root, registry):
    """The node's puller (slurmnode/puller.py, run by the Prolog) for a Slurm session: an
    image without python3 fails the pull, naming the image; one with it is ready."""
    cache = job_root / "node-cache"
    args = argparse.Namespace(cache=str(cache), timeout=120.0, cap_mb=None, max_unpacked_mb=None)
    for name, ok in (("switchyard/base:1", False), ("switchyard/python:3", True)):
        ref = f"{registry}/{name}"
        digest = Skopeo(timeout_s=60).digest(parse_image_ref(ref, default_registry=registry))
        request = {
            "image": ref,
            "digest": digest,
            "command": ["true"],
            "script": None,
            "given": [],
            "session": True,
            "needed": ["/dev", "/proc", "/tmp", "/home/sandbox", "/run/switchyard"],
            "work": str(job_root / "work"),
            "job_id": "7",
        }
        if ok:
            assert puller.ready(args, request)["state"] == "ready"
        else:
            with pytest.raises(CannotRun, match=f"image {re.escape(ref)} has no python3"):
                puller.ready(args, request)
