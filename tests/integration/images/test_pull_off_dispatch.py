"""A local job's image is pulled by a puller of its own, off the dispatch path and off the
backend's root-wide lock (docs/containers.md, "On the local backend"): real registry behind
a throttling relay, real bubblewrap."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest

from scheduling.backends.base import Job, JobState, SubmitRequest
from scheduling.backends.local.images import image_cache
from tests.conftest import in_ci
from tests.integration.images.conftest import FlakyProxy
from tests.unit.scheduling.local_backend.helpers import deadline_wait, finished, request

pytestmark = [pytest.mark.registry, pytest.mark.integration]
if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))

SLOW = 1 << 20  # bytes/s: the Python image (~20 MB of layers) takes many seconds
FAST = 512 << 20


@pytest.fixture
def proxy(registry):
    relay = FlakyProxy(registry, bytes_per_s=SLOW)
    yield relay
    relay.close()


def through(req: SubmitRequest, registry: str, proxy: FlakyProxy) -> SubmitRequest:
    """The request with its image pulled through the relay (same digest)."""
    image = (req.spec.image or "").replace(registry, proxy.address)
    return dataclasses.replace(req, spec=dataclasses.replace(req.spec, image=image))


def pulling(job: Job) -> bool:
    return job.state is JobState.PENDING and job.pull is not None and not job.pull.finished


def test_a_job_without_an_image_is_not_held_by_a_slow_pull_in_its_dispatch(
    make, in_image, registry, proxy
):
    backend = make()
    slow = through(in_image("switchyard/python:3", "slow-pull", ["true"]), registry, proxy)
    plain = request("no-image", ["true"])
    t0 = time.monotonic()
    jobs = backend.submit_many([slow, plain])
    assert time.monotonic() - t0 < 3, "the dispatch waited for a pull"
    assert jobs[0].state is JobState.PENDING and jobs[0].reason.startswith("pulling image")
    assert finished(backend, "no-image", timeout=20).state is JobState.SUCCEEDED
    # Still pulling, with its progress in its reason, while the other job ran and ended.
    seen = deadline_wait(
        backend, "slow-pull", lambda j: pulling(j) and j.pull.done_bytes > 0, timeout=30
    )
    assert seen.pull is not None and seen.pull.total_bytes and seen.pull.seconds > 0
    assert seen.reason.startswith("pulling image ") and "% (" in seen.reason, seen.reason
    assert seen.reason.endswith(" MB)"), seen.reason
    proxy.rate = FAST
    job = finished(backend, "slow-pull", timeout=90)
    assert job.state is JobState.SUCCEEDED, job.reason
    assert job.pull is not None and job.pull.finished
    assert job.pull.done_bytes > 1 << 20 and job.pull.seconds >= seen.pull.seconds


def test_an_evicted_image_is_pulled_again_without_holding_the_backends_calls(
    make, in_image, registry, proxy
):
    backend = make()
    proxy.rate = FAST
    # Holds the node until cancelled: a fixed sleep could end before a pull under load does.
    backend.submit(request("blocker", ["sleep", "300"], cpus=16))
    req = through(in_image("switchyard/python:3", "evicted", ["true"]), registry, proxy)
    backend.submit(req)
    # Pulled while the blocker holds the node: it waits, its image here.
    deadline_wait(backend, "evicted", lambda j: j.pull is not None and j.pull.finished, 60)
    assert backend.find("evicted").state is JobState.PENDING
    assert image_cache(backend.root).evict(0)  # nothing pins it: other pulls pushed it out
    proxy.rate = SLOW
    backend.cancel("blocker")
    assert finished(backend, "blocker", timeout=20).state is JobState.CANCELLED
    # The pass that would start it finds its image gone: it waits for a new pull, and
    # neither that pass nor another job's submit waits for the registry.
    t0 = time.monotonic()
    job = backend.poll(["evicted"])["evicted"]
    assert time.monotonic() - t0 < 2
    job = deadline_wait(backend, "evicted", pulling, timeout=10)
    assert "removed from this node's cache" in job.reason or job.reason.startswith("pulling")
    took: dict[str, float] = {}

    def submit_and_poll() -> None:
        start = time.monotonic()
        backend.submit(request("innocent", ["true"]))
        backend.poll(["innocent", "evicted"])
        took["calls"] = time.monotonic() - start

    thread = threading.Thread(target=submit_and_poll)
    thread.start()
    thread.join(timeout=10)
    assert took.get("calls", 99) < 2, took
    assert finished(backend, "innocent", timeout=20).state is JobState.SUCCEEDED
    assert pulling(backend.poll(["evicted"])["evicted"])  # still pulling meanwhile
    proxy.rate = FAST
    job = finished(backend, "evicted", timeout=90)
    assert job.state is JobState.SUCCEEDED, job.reason


def test_the_walltime_does_not_count_the_pull(make, in_image, registry, proxy):
    backend = make()
    proxy.rate = 4 << 20  # several seconds of pull, more than the walltime
    req = in_image("switchyard/python:3", "tight", ["sleep", "1.5"], walltime_s=4)
    req = through(req, registry, proxy)
    t0 = time.monotonic()
    backend.submit(req)
    job = finished(backend, "tight", timeout=120)
    assert job.state is JobState.SUCCEEDED, job.reason
    assert job.pull is not None and job.pull.finished and job.pull.seconds > 4, job.pull
    assert time.monotonic() - t0 > 5.5  # the pull and the command, beyond the walltime
    assert job.started_at is not None and job.ended_at is not None
    assert (job.ended_at - job.started_at).total_seconds() < 4  # the run alone


def test_a_cached_image_is_reported_pulled_at_once_and_a_failed_pull_fails_the_job(
    make, in_image, registry, proxy
):
    backend = make()
    proxy.rate = FAST
    first = through(in_image("demo/tiny:1", "first", ["true"]), registry, proxy)
    assert finished(backend, backend.submit(first).backend_id, 60).state is JobState.SUCCEEDED
    again = backend.submit(in_image("demo/tiny:1", "again", ["true"]))
    assert again.pull is not None and again.pull.finished
    assert (again.pull.seconds, again.pull.done_bytes) == (0.0, 0)
    assert finished(backend, "again", timeout=30).state is JobState.SUCCEEDED
    assert image_cache(backend.root).evict(0)  # no job holds it any more
    proxy.close()  # the registry is gone: the pull fails, and its job with the reason
    gone = backend.submit(through(in_image("demo/tiny:1", "gone", ["true"]), registry, proxy))
    job = finished(backend, gone.backend_id, timeout=60)
    assert job.state is JobState.FAILED
    assert job.reason.startswith(f"pulling image {proxy.address}/demo/tiny:1 failed"), job.reason
