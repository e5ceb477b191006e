"""Images that try to reach past the sandbox, or to break the local backend for everyone
(docs/containers.md, docs/security.md): real registry, real bubblewrap, real job accounts.
Each image is made for its test (conftest.ImageBuilder) and pushed to the test registry."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.images import BadImage, ImageCache, PullFailed, Skopeo
from scheduling.backends.local.images import MAX_SYSTEM_ENTRIES, image_cache
from tests.conftest import in_ci
from tests.integration.images.test_run_local import run
from tests.unit.scheduling.local_backend.helpers import finished, running

pytestmark = [pytest.mark.registry, pytest.mark.integration]
if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))


def state_of(backend, key: str) -> dict:
    return json.loads((Path(backend.root) / "jobs" / key / "state.json").read_text())


def test_the_jobs_environment_is_set_inside_the_sandbox_and_never_on_the_hosts_bwrap(
    make, in_image, build_image
):
    """bwrap runs on the host: what it runs with is the site's environment only. The task's
    env and the image's Env (its LD_LIBRARY_PATH too, as CUDA images set it) reach the
    command inside."""
    backend = make()
    libs = build_image.push(
        "libs", config={"Env": ["PATH=/bin", "LD_LIBRARY_PATH=/opt/libs", "DEMO_VERSION=1"]}
    )
    req = in_image(
        libs,
        "env-inside",
        ["sh", "-c", 'echo "mine=$MINE v=$DEMO_VERSION libs=$LD_LIBRARY_PATH"; sleep 2'],
        env={"MINE": "yes"},
    )
    backend.submit(req)
    assert running(backend, "env-inside", timeout=60).state is JobState.RUNNING
    bwrap = state_of(backend, "env-inside")["child_pid"]
    with open(f"/proc/{bwrap}/cmdline", "rb") as f:
        assert f.read().split(b"\0")[0].endswith(b"bwrap")
    with open(f"/proc/{bwrap}/environ", "rb") as f:
        host_env = dict(p.split(b"=", 1) for p in f.read().split(b"\0") if p)
    assert set(host_env) == {b"PATH", b"LANG"}, host_env
    job = finished(backend, "env-inside", timeout=30)
    assert job.state is JobState.SUCCEEDED, job.reason
    assert "mine=yes v=1 libs=/opt/libs" in backend.log("env-inside")


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"Env": ["PATH=/bin", "LD_PRELOAD=/tmp/evil.so"]}, ["Env", "LD_PRELOAD", "reserved"]),
        ({"Env": ["LD_AUDIT=/tmp/evil.so"]}, ["Env", "LD_AUDIT", "reserved"]),
        ({"Env": ["SWITCHYARD_TASK_KEY=other"]}, ["Env", "SWITCHYARD_TASK_KEY"]),
        ({"Env": "PATH=/bin"}, ["Env", "expected a list of strings"]),
        ({"Env": ["NOVALUE"]}, ["Env", "NAME=value", "NOVALUE"]),
        ({"WorkingDir": "srv/demo"}, ["WorkingDir", "absolute path", "srv/demo"]),
        ({"WorkingDir": "/../../../../etc"}, ["WorkingDir", "without ..", "/../../../../etc"]),
        ({"Entrypoint": "/bin/sh"}, ["Entrypoint", "a list of strings"]),
        ({"Cmd": [1, 2]}, ["Cmd", "a list of strings"]),
    ],
)
def test_an_image_whose_config_no_job_can_run_with_fails_at_its_pull_saying_why(
    make, in_image, build_image, config, words
):
    backend = make()
    image = build_image.push("badconfig", config=config)
    state, reason, _ = run(backend, in_image(image, "bad-config", ["true"]))
    assert state is JobState.FAILED
    assert reason.startswith("pulling image ") and "config" in reason, reason
    for word in words:
        assert word in reason, reason


def test_an_image_without_entrypoint_or_cmd_fails_only_its_own_task(make, in_image, build_image):
    """Submitted together with a good one: the good one runs, the bad one says why."""
    backend = make()
    bare = build_image.push("bare", config={"Entrypoint": None, "Cmd": None})
    bad = in_image(bare, "no-program")
    good = in_image("demo/tiny:1", "beside", ["sh", "-c", "echo fine"])
    backend.submit_many([bad, good])
    one, two = finished(backend, "no-program", timeout=60), finished(backend, "beside", timeout=60)
    assert one.state is JobState.FAILED
    assert "neither Entrypoint nor Cmd" in one.reason and "give it a command" in one.reason
    assert two.state is JobState.SUCCEEDED, two.reason
    # With a command of its own the same image runs.
    state, reason, log = run(backend, in_image(bare, "with-command", ["sh", "-c", "echo ran"]))
    assert state is JobState.SUCCEEDED and "ran" in log, (reason, log)


def test_an_image_with_too_many_top_level_entries_fails_alone_with_the_reason(
    make, in_image, build_image
):
    """Its entries are bound one by one: thousands would make a launch plan bigger than the
    launcher takes, and the other jobs of its request would not start either."""
    backend = make()
    many = [("file", f"/entry-{i:05d}-{'x' * 40}", "") for i in range(8000)]
    crowded = build_image.push("crowded", entries=many)
    bad = in_image(crowded, "crowded", ["true"])
    good = in_image("demo/tiny:1", "uncrowded", ["sh", "-c", "echo fine"])
    backend.submit_many([bad, good])
    one, two = finished(backend, "crowded", timeout=60), finished(backend, "uncrowded", timeout=60)
    assert one.state is JobState.FAILED
    assert f"more than {MAX_SYSTEM_ENTRIES} entries at its top level" in one.reason, one.reason
    assert two.state is JobState.SUCCEEDED, two.reason


def test_a_link_where_the_sandbox_mounts_is_replaced_by_a_folder_of_the_sandbox(
    make, in_image, build_image
):
    """/tmp a link out of the image: the job's /tmp is still its own tmpfs, not the link."""
    backend = make()
    image = build_image.push("tmplink", entries=[("link", "/tmp", "/etc")])
    script = (
        'test -L /tmp && echo TMP-IS-A-LINK; echo x > /tmp/mine && echo "wrote $(cat /tmp/mine)"'
    )
    state, reason, log = run(backend, in_image(image, "tmp-link", ["sh", "-c", script]))
    assert state is JobState.SUCCEEDED, (reason, log)
    assert "TMP-IS-A-LINK" not in log and "wrote x" in log


def test_a_link_on_the_way_to_where_the_sandbox_mounts_refuses_the_job(
    make, in_image, build_image, job_root
):
    """The job's folders live under the backend's root: an image whose folder on the way
    there is a link (out of the image, to /) is refused, rather than followed on the host."""
    backend = make()
    top = "/" + str(job_root).strip("/").split("/")[0]
    image = build_image.push("waylink", entries=[("link", top, "/")])
    state, reason, _ = run(backend, in_image(image, "way-link", ["true"]))
    assert state is JobState.FAILED
    assert f"the image's {top} is a link" in reason and "no link is followed" in reason, reason


def test_a_link_where_the_sandbox_puts_its_busybox_refuses_the_job(
    make, in_image, build_image, tmp_path
):
    """The sandbox binds the host's busybox at /.switchyard/busybox: an image whose
    /.switchyard links out of it (through bwrap's /oldroot, to a folder on the host) is
    refused, and nothing is made on the host."""
    backend = make()
    host = tmp_path / "target"
    host.mkdir(mode=0o1777)
    host.chmod(0o1777)
    image = build_image.push("bblink", entries=[("link", "/.switchyard", f"/oldroot{host}")])
    state, reason, _ = run(backend, in_image(image, "busybox-link", ["true"]))
    assert state is JobState.FAILED
    assert "the image's /.switchyard is a link" in reason, reason
    assert list(host.iterdir()) == []


def test_a_working_dir_through_a_link_is_looked_up_inside_the_image(make, in_image, build_image):
    """WorkingDir /app/. where /app links to /srv/inner: found inside the image (not on
    the host, where /srv/inner does not exist), and normalised."""
    backend = make()
    assert not os.path.exists("/srv/inner")
    image = build_image.push(
        "wdlink",
        entries=[("dir", "/srv", ""), ("dir", "/srv/inner", ""), ("link", "/app", "/srv/inner")],
        config={"WorkingDir": "/app/./"},
    )
    state, reason, log = run(backend, in_image(image, "wd-link", ["sh", "-c", "pwd"]))
    assert state is JobState.SUCCEEDED, (reason, log)
    assert log.strip().splitlines()[-1] in ("/app", "/srv/demo"), log


def test_the_backends_cache_keeps_to_its_cap_but_never_evicts_a_running_jobs_image(
    make, in_image, settings
):
    settings.SWITCHYARD_IMAGE_CACHE_MAX_MB = 0  # every image no job holds goes
    backend = make()
    cache = image_cache(backend.root)
    first = in_image("demo/tiny:1", "cap-1", ["true"])
    assert run(backend, first)[0] is JobState.SUCCEEDED
    held = in_image("demo/tiny:2", "cap-2", ["sh", "-c", "sleep 3"])
    backend.submit(held)
    assert running(backend, "cap-2", timeout=60).state is JobState.RUNNING
    assert cache.get(first.spec.image_digest) is None  # least recently used, held by none
    third = in_image("switchyard/base:1", "cap-3", ["true"])
    assert run(backend, third)[0] is JobState.SUCCEEDED
    assert cache.get(held.spec.image_digest) is not None  # its job runs
    assert finished(backend, "cap-2", timeout=30).state is JobState.SUCCEEDED


def test_an_image_that_unpacks_past_the_nodes_limit_is_refused(make, in_image, settings):
    settings.SWITCHYARD_IMAGE_MAX_UNPACKED_MB = 5  # the Python image unpacks to ~50 MB
    backend = make()
    state, reason, _ = run(backend, in_image("switchyard/python:3", "too-big", ["true"]))
    assert state is JobState.FAILED
    assert "unpacks to more than 5 MB" in reason, reason
    assert not any(image_cache(backend.root).tmp.iterdir())  # nothing unpacked is left


def test_the_cache_refuses_what_unpacks_past_its_limit_and_stops_a_slow_unpack(job_root, ref):
    small = ImageCache(job_root / "small", max_unpacked_bytes=5 << 20, skopeo=Skopeo())
    with pytest.raises(BadImage, match="unpacks to more than"):
        small.pull(ref("switchyard/python:3"))
    assert not list(small.images.iterdir())
    slow = ImageCache(job_root / "slow", unpack_timeout_s=0.01, skopeo=Skopeo())
    with pytest.raises(PullFailed, match=r"did not finish in 0.01s"):
        slow.pull(ref("switchyard/python:3"))
    assert not list(slow.images.iterdir()) and not list(slow.tmp.iterdir())
    big = ImageCache(job_root / "big", max_unpacked_bytes=500 << 20, skopeo=Skopeo())
    assert big.pull(ref("switchyard/python:3")).rootfs_bytes > 5 << 20
