"""Tasks in images on the local backend: real registry, real bubblewrap, real job accounts
(docs/containers.md). The job runs over the image's root file system, in the sandbox every
job gets, with what the image says about how to run it."""

from __future__ import annotations

import dataclasses
import os
import pwd
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from scheduling.backends.base import JobState, SubmitRequest
from scheduling.backends.local import LocalBackend
from scheduling.backends.local.images import image_cache
from scheduling.spec import TASK_TYPES
from tests.conftest import ROOT, in_ci
from tests.unit.scheduling.local_backend.helpers import finished, running

pytestmark = [pytest.mark.registry, pytest.mark.integration]
if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))


def run(backend: LocalBackend, req: SubmitRequest) -> tuple[JobState, str, str]:
    backend.submit(req)
    job = finished(backend, req.key, timeout=60)
    return job.state, job.reason, backend.log(req.key)


def test_a_task_runs_in_its_image_and_not_on_the_hosts_system(make, in_image):
    backend = make()
    script = (
        "cat /etc/os-release; cat /etc/switchyard/image; "
        "test -e /usr/bin/python3 && echo HOST-PYTHON; "
        "test -e /usr/bin/prlimit && echo HOST-PRLIMIT; "
        "test -e /usr/lib/x86_64-linux-gnu/libc.so.6 && echo HOST-LIBC; "
        'echo "pwd=$(pwd) home=$HOME path=$PATH"; echo ok > "$HOME/out"; cat "$HOME/out"'
    )
    state, reason, log = run(backend, in_image("switchyard/base:1", "base", ["sh", "-c", script]))
    assert state is JobState.SUCCEEDED, (reason, log)
    assert "ID=switchyard-base" in log and "switchyard-base:1" in log
    assert "HOST-" not in log, log
    assert "\nok\n" in log


def test_the_images_entrypoint_cmd_env_and_workdir_are_honoured(make, in_image):
    backend = make()
    # No command: the image's Entrypoint runs its Cmd (prints its version, cats the release).
    state, reason, log = run(backend, in_image("demo/tiny:2", "tiny"))
    assert state is JobState.SUCCEEDED, (reason, log)
    assert "2" in log.split()
    # A command: after the Entrypoint, in place of the Cmd; the image's Env and WorkingDir.
    state, reason, log = run(
        backend,
        in_image(
            "demo/tiny:1",
            "tiny-cmd",
            ["sh", "-c", 'echo "v=$DEMO_VERSION pwd=$(pwd) mine=$MINE"'],
            env={"MINE": "yes"},
        ),
    )
    assert state is JobState.SUCCEEDED, (reason, log)
    assert "v=1 pwd=/srv/demo mine=yes" in log


def test_two_tasks_in_different_images_run_side_by_side(make, in_image):
    backend = make()
    wait = "sleep 1; cat /etc/switchyard/image; test -e /usr/bin/python3 && echo PY; true"
    a = in_image("switchyard/base:1", "side-a", ["sh", "-c", wait])
    b = in_image("switchyard/python:3", "side-b", ["sh", "-c", wait])
    backend.submit_many([a, b])
    ja, jb = finished(backend, "side-a", timeout=60), finished(backend, "side-b", timeout=60)
    assert ja.state is JobState.SUCCEEDED and jb.state is JobState.SUCCEEDED
    assert "switchyard-base" in backend.log("side-a") and "PY" not in backend.log("side-a")
    assert "switchyard-python" in backend.log("side-b") and "PY" in backend.log("side-b")


def test_the_pull_is_recorded_and_the_image_stays_pinned_while_the_job_runs(make, in_image):
    backend = make()
    req = in_image("demo/tiny:1", "pinned", ["sh", "-c", "sleep 2"])
    backend.submit(req)
    cache = image_cache(backend.root)
    # Pulled while the job waits (its puller, driven by the polls), then started.
    assert running(backend, "pinned", timeout=60).state is JobState.RUNNING
    assert cache.get(req.spec.image_digest) is not None
    # The running job's supervisor holds the image: eviction to nothing leaves it there.
    assert cache.evict(0) == []
    assert cache.get(req.spec.image_digest) is not None
    job = finished(backend, "pinned", timeout=30)
    assert job.state is JobState.SUCCEEDED
    state = (Path(backend.root) / "jobs" / "pinned" / "state.json").read_text()
    assert "image " in state and "demo/tiny:1" in state  # what the pull took, as it started
    assert cache.evict(0) == [req.spec.image_digest]  # once it ended, no longer held


def test_an_image_the_registry_lacks_fails_the_attempt_with_a_reason(make, in_image):
    backend = make()
    req = in_image("demo/tiny:1", "absent", ["true"])
    gone = "sha256:" + "0" * 64
    req = dataclasses.replace(req, spec=dataclasses.replace(req.spec, image_digest=gone))
    state, reason, _ = run(backend, req)
    assert state is JobState.FAILED
    assert reason.startswith("pulling image ") and "demo/tiny" in reason


# Only inside the sandbox: as root on the host these would remount and write for real.
ATTACKS = """
mount -o remount,bind,rw /etc 2>/dev/null && echo REMOUNTED-ETC
mount -o remount,bind,rw /bin 2>/dev/null && echo REMOUNTED-BIN
mount -o remount,rw / 2>/dev/null && echo REMOUNTED-ROOT
echo x > /etc/switchyard-probe 2>/dev/null && echo WROTE-ETC
echo x > /bin/switchyard-probe 2>/dev/null && echo WROTE-BIN
"""


def probe(port: int, attacks: str = ATTACKS) -> str:
    """The isolation probe (tests/unit/scheduling/test_isolation.py) in busybox's shell."""
    database = settings.DATABASES["default"]["NAME"]
    return f"""
echo "uid=$(id -u)"
grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status
{attacks}test -e {database} && echo SAW-DATABASE
test -e {ROOT}/manage.py && echo SAW-CODE
test -e {settings.VAR_DIR}/secret-key && echo SAW-SECRET-KEY
timeout 5 nc 127.0.0.1 {port} </dev/null 2>/dev/null && echo NETWORK
unshare -U true 2>/dev/null && echo NESTED-USERNS
echo done
"""


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on the host's loopback that answers and hangs up (so nc ends)."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("type", TASK_TYPES)
def test_the_isolation_probes_hold_inside_an_image(make, in_image, listener, type):
    backend = make()
    req = in_image("switchyard/base:1", "probe", ["sh", "-c", probe(listener)], type=type)
    state, reason, log = run(backend, req)
    assert state is JobState.SUCCEEDED, (reason, log)
    assert f"uid={pwd.getpwnam('switchyard-job').pw_uid}" in log
    assert "CapEff:\t0000000000000000" in log and "CapPrm:\t0000000000000000" in log
    for leak in ("REMOUNTED", "WROTE-", "SAW-", "NESTED-USERNS", "NETWORK"):
        assert leak not in log, log
    assert log.rstrip().endswith("done")


def test_the_probe_finds_the_network_and_the_portal_outside_the_sandbox(listener):
    """The probe above can fail: the same, as root on the host with busybox, finds them."""
    import subprocess

    out = subprocess.run(
        ["busybox", "sh", "-c", probe(listener, "")], capture_output=True, text=True, timeout=30
    ).stdout
    assert "uid=0" in out and "SAW-CODE" in out and "NETWORK" in out


def test_the_limits_hold_inside_an_image(make, in_image):
    backend = make(max_processes=64)
    script = "grep -E 'Max (processes|file size|core)' /proc/self/limits"
    state, reason, log = run(backend, in_image("switchyard/base:1", "limits", ["sh", "-c", script]))
    assert state is JobState.SUCCEEDED, (reason, log)
    assert "Max processes             64" in log
    assert "Max core file size        0" in log


def test_a_task_in_an_image_sees_its_storage_area_at_its_path_and_starts_there(
    make, in_image, job_root
):
    """The area's path runs through folders the image has too (/work is the Python image's
    WorkingDir): they are made on the sandbox's root and the image's entries bound beside."""
    from scheduling.decisions.storage import JobStorage, Mount

    area = job_root / "area"
    area.mkdir()
    area.chmod(0o777)
    (area / "data.txt").write_text("from the area\n")
    (area / "data.txt").chmod(0o644)
    backend = make()
    req = in_image(
        "switchyard/python:3",
        "area",
        ["python3", "-c", "import os; print(open('data.txt').read().strip(), os.getcwd())"],
    )
    req = dataclasses.replace(
        req, storage=JobStorage(mounts=(Mount(str(area), False, "user"),), workdir=str(area))
    )
    state, reason, log = run(backend, req)
    assert state is JobState.SUCCEEDED, (reason, log)
    assert f"from the area {area}" in log


def test_a_registry_that_goes_away_mid_pull_fails_the_attempt_and_the_retry_pulls(
    make, in_image, flaky_registry
):
    """The python image (21 MB) through a relay cut after 1 MB: that attempt fails naming
    the pull; with the registry back, the next attempt (the engine's retry) pulls and runs."""
    backend = make()
    base = in_image("switchyard/python:3", "cut-1", ["python3", "-c", "print('ran')"])
    name = base.spec.image.partition("/")[2]
    spec = dataclasses.replace(base.spec, image=f"{flaky_registry.address}/{name}")
    flaky_registry.cut_after(1 << 20)
    state, reason, _ = run(backend, dataclasses.replace(base, spec=spec))
    assert state is JobState.FAILED
    assert reason.startswith(f"pulling image {flaky_registry.address}/{name} failed"), reason
    flaky_registry.restore()
    retry = dataclasses.replace(base, key="cut-2", spec=dataclasses.replace(spec, name="cut-2"))
    state, reason, log = run(backend, retry)
    assert state is JobState.SUCCEEDED, (reason, log)
    assert "ran" in log
