"""A live sandbox in an image on the real Slurm (docs/sandbox-slurm.md): the node's Prolog
pulls the image as for a batch job, the session's agent runs with the image's own python3
over its root file system. Needs the cluster (docker/slurm/cluster.sh) and the registry
(`make registry-up`). One session (each start is a job start and, once, a pull).
"""

from __future__ import annotations

import os

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.images import Skopeo
from scheduling.decisions.images import parse_image_ref
from tests.integration.conftest import wait_for
from tests.integration.images.conftest import registry  # noqa: F401 (fixture)
from tests.integration.slurm.test_sandboxes import run, session_request, start_session, wait_gone

HOST_ONLY = "/usr/bin/sbatch"  # the node has Slurm's clients; no image does

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.registry]


def test_a_session_in_an_image_runs_its_agent_with_the_images_python(slurm, registry):  # noqa: F811
    ref = f"{registry}/switchyard/python:3"
    backend_id = start_session(slurm, image=ref, image_digest=digest_of(ref, registry))
    try:
        # The image has python3 and no shell: the commands are Python's.
        result = run(slurm, backend_id, "python3", "-c", "import os; print(os.getcwd())")
        assert (result.exit_code, result.stdout) == (0, b"/home/sandbox\n"), result
        os_release = slurm.get_file(backend_id, "/etc/os-release", limit=4096).decode()
        assert "ID=switchyard-python" in os_release
        # The node's own system is not in it (its python3 is the image's).
        assert os.path.exists(HOST_ONLY)
        look = f"import os, sys; print(sys.executable, os.path.exists({HOST_ONLY!r}))"
        seen = run(slurm, backend_id, "python3", "-c", look).stdout.decode().split()
        assert seen[1] == "False", seen
        slurm.put_file(backend_id, "f", b"x\n")
        assert slurm.get_file(backend_id, "f", limit=10) == b"x\n"
    finally:
        slurm.cancel(backend_id)
    wait_gone(slurm, backend_id)

    # An image without python3: the session fails, never runs. (The reason naming the image
    # is the pull's, from the node's Prolog, which runs the cluster's own checkout of the
    # code: test_session_images.py checks the puller's refusal itself.)
    base = f"{registry}/switchyard/base:1"
    failed = slurm.submit(session_request(image=base, image_digest=digest_of(base, registry)))
    ended = failed.backend_id
    wait_for(lambda: slurm.poll([ended])[ended].state.finished, timeout=120, what="its end")
    job = slurm.poll([ended])[ended]
    assert job.state is JobState.FAILED, job


def digest_of(ref: str, default: str) -> str:
    """The digest the tag names now, as a submission pins it."""
    return Skopeo(timeout_s=60).digest(parse_image_ref(ref, default_registry=default))
