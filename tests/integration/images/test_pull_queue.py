"""How many images a local backend pulls at once, what its pullers inherit, and re-pulls after
an eviction (docs/containers.md, "On the local backend"): real pullers, a real registry, and
a registry that never answers."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import time
import uuid

import pytest

from scheduling.backends.base import JobState, SubmitRequest
from scheduling.backends.images import ImageCache
from scheduling.backends.local import puller
from scheduling.backends.local.images import image_cache
from tests.conftest import in_ci
from tests.unit.scheduling.local_backend.helpers import deadline_wait, finished, request

pytestmark = [pytest.mark.registry, pytest.mark.integration]
if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))


def on(host: str, key: str) -> SubmitRequest:
    """A job whose image (its own digest) is on `host`."""
    req = request(key, ["true"])
    digest = "sha256:" + hashlib.sha256(f"{key}{uuid.uuid4()}".encode()).hexdigest()
    spec = dataclasses.replace(req.spec, image=f"{host}/probe/{key}:1", image_digest=digest)
    return dataclasses.replace(req, spec=spec)


def pullers(root: str) -> list[int]:
    """The live pullers of the backend at `root`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"import puller" in cmd and root.encode() in cmd:
                found.append(int(pid))
    return found


def reasons(backend, keys: list[str]) -> dict[str, str]:
    return {k: j.reason for k, j in backend.poll(keys).items()}


def test_at_most_max_pulls_pullers_run_and_the_other_jobs_queue_oldest_first(
    make, silent, settings
):
    settings.SWITCHYARD_IMAGE_MAX_PULLS = 2
    settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S = 3
    backend = make()
    keys = [f"img-{i}" for i in range(5)]
    for key in keys:
        backend.submit(on(silent, key))
    assert len(pullers(backend.root)) == 2
    assert reasons(backend, keys) == {
        "img-0": "pulling image",
        "img-1": "pulling image",
        "img-2": "pulling image (queued behind 2 pulls)",
        "img-3": "pulling image (queued behind 3 pulls)",
        "img-4": "pulling image (queued behind 4 pulls)",
    }
    # The first two pulls time out: their jobs fail, and the two oldest queued get the slots.
    assert finished(backend, "img-0", timeout=30).state is JobState.FAILED
    deadline_wait(backend, "img-3", lambda j: j.reason == "pulling image", timeout=30)
    assert len(pullers(backend.root)) <= 2
    assert reasons(backend, ["img-2", "img-4"]) == {
        "img-2": "pulling image",
        "img-4": "pulling image (queued behind 2 pulls)",
    }
    job = finished(backend, "img-4", timeout=60)
    assert job.state is JobState.FAILED and "did not answer" in job.reason, job.reason


def test_the_puller_gets_the_workers_proxy_and_registry_credentials_and_nothing_else(
    make, silent, settings, monkeypatch
):
    settings.SWITCHYARD_IMAGE_PULL_TIMEOUT_S = 3
    passed = {
        "HTTPS_PROXY": "http://proxy.example:3128",
        "http_proxy": "http://proxy.example:3128",
        "NO_PROXY": "127.0.0.1,localhost",
        "REGISTRY_AUTH_FILE": "/etc/switchyard/auth.json",
    }
    for name, value in passed.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SWITCHYARD_PROBE_SECRET", "not for the puller")
    backend = make()
    backend.submit(on(silent, "env"))
    # The poll starts it if the submit did not; a puller forking skopeo shows twice for a
    # moment, with the same environment.
    deadline = time.monotonic() + 20
    while not (found := pullers(backend.root)):
        assert time.monotonic() < deadline, backend.poll(["env"])
        backend.poll(["env"])
        time.sleep(0.05)
    pid = found[0]
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(v.decode().split("=", 1) for v in f.read().split(b"\0") if b"=" in v)
    assert env == {**passed, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    finished(backend, "env", timeout=30)


def test_repulls_after_evictions_do_not_use_up_the_jobs_starts(make, in_image):
    backend = make()
    backend.submit(request("block-0", ["sleep", "60"], cpus=16))
    backend.submit(in_image("demo/tiny:1", "thrashed", ["true"]))
    for i in range(4):  # more than MAX_STARTS
        job = deadline_wait(
            backend, "thrashed", lambda j: j.pull is not None and j.pull.finished, 60
        )
        assert job.state is JobState.PENDING, job.reason
        # Other pulls pushed its image out, and then the node frees: the start finds the
        # image gone, and the job waits for a new pull while the next blocker runs.
        assert image_cache(backend.root).evict(0)
        backend.submit(request(f"block-{i + 1}", ["sleep", "60"], cpus=16))
        backend.cancel(f"block-{i}")
        deadline_wait(backend, f"block-{i + 1}", lambda j: j.state is JobState.RUNNING, 30)
    backend.cancel("block-4")
    job = finished(backend, "thrashed", timeout=60)
    assert job.state is JobState.SUCCEEDED, job.reason


def test_a_puller_that_fails_for_want_of_the_node_names_no_path_of_it(tmp_path, registry):
    cache = ImageCache(tmp_path / "cache")
    digest = "sha256:" + "ab" * 32
    (cache.layouts / digest.partition(":")[2]).write_text("in the way")  # mkdir fails here
    status = puller.pull(
        {
            "cache": str(cache.root),
            "timeout_s": 10,
            "image": f"{registry}/demo/tiny:1",
            "digest": digest,
            "status": str(tmp_path / "status.json"),
            "started": 0,
        }
    )
    assert status["ok"] is False
    assert str(tmp_path) not in status["error"], status["error"]
    assert status["error"].endswith("failed on this node; the worker's log says why")
