"""Tasks in images on the localhost Slurm cluster (docs/containers.md, "Slurm notes"): the
portal writes the job's image file, every node's Prolog pulls the image into that node's
cache as the cache's account, the batch script runs the command in the image inside the
sandbox. Needs the cluster (docker/slurm/cluster.sh) and the registry (`make registry-up`).
"""

from __future__ import annotations

import math
import os
import pwd
import re
import subprocess
import time

import pytest

from scheduling.backends.base import JobState
from scheduling.backends.slurm.imagejob import pull_path
from scheduling.models import ImageRegistry, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import ROOT
from tests.integration.images.conftest import (  # noqa: F401 (fixtures)
    FlakyProxy,
    build_image,
    registry,
)
from tests.integration.slurm.conftest import STATE_DIR, drive, job_id, scontrol, submit_task

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.registry,
    pytest.mark.django_db(transaction=True),
]


@pytest.fixture
def images(site, settings, registry):  # noqa: F811
    """The site's pools on Slurm take any image of the test registry."""
    settings.SWITCHYARD_IMAGE_REGISTRIES = []
    allow(settings, registry)
    return registry


def allow(settings, address: str) -> None:
    settings.SWITCHYARD_IMAGE_REGISTRIES = [*settings.SWITCHYARD_IMAGE_REGISTRIES, address]
    ImageRegistry.objects.update_or_create(host=address, defaults={"any_image": True})
    site_view_invalidate()


def output(slurm, task: Task) -> str:
    return slurm.log(task.backend_id)


def node_states() -> dict[str, str]:
    out = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t %E"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "SLURM_CONF": str(STATE_DIR / "etc" / "slurm.conf")},
    ).stdout
    return {line.split()[0]: line for line in out.splitlines() if line.strip()}


def test_a_task_runs_in_its_image_on_slurm(images, api, slurm):
    host_only = next(p for p in ("/usr/bin/perl", "/usr/bin/dpkg") if os.path.exists(p))
    script = (
        "cat /etc/os-release; cat /etc/switchyard/image; "
        f"test -e {host_only} && echo HOST-USR || echo NO-HOST-USR; "
        # What a hostile job tries: the node's cache and the job folders' files.
        f"touch {STATE_DIR}/images/x 2>/dev/null && echo WROTE-CACHE; "
        f"ls {STATE_DIR}/images 2>/dev/null && echo SEES-CACHE; true"
    )
    shell = submit_task(
        api, name="img-base", image=f"{images}/switchyard/base:1", command=["sh", "-c", script]
    )
    entry = submit_task(api, name="img-entry", image=f"{images}/demo/tiny:2", command=None)
    base, tiny = drive([shell, entry], timeout=180)
    log = output(slurm, base)
    assert base.state == "succeeded", (base.reason, log)
    assert "ID=switchyard-base" in log and "switchyard-base:1" in log, log
    assert "NO-HOST-USR" in log and "WROTE-CACHE" not in log and "SEES-CACHE" not in log, log
    assert tiny.state == "succeeded", (tiny.reason, output(slurm, tiny))
    assert output(slurm, tiny).split()[-1] == "2"  # its Entrypoint ran its Cmd
    # The pull is the backend's to report (Job.pull), from the node's pull file.
    job = slurm.find(base.backend_id.partition(":")[2])
    assert job is not None and job.pull is not None and job.pull.finished, job

    # Outside the sandbox too, the job's account can write neither the node's cache nor a
    # pull file (its own or another job's).
    account = pwd.getpwnam(slurm.service_account).pw_name
    cache = STATE_DIR / "images" / job.nodes[0]
    targets = [
        cache / "images" / "x",
        cache / "blobs" / "sha256" / "x",
        cache / "locks" / "x",
        pull_path(slurm.workdir, base.backend_id.partition(":")[2], "forged"),
        pull_path(slurm.workdir, "sy-someone-else-1", "n1"),
    ]
    for target in targets:
        done = subprocess.run(
            ["/usr/sbin/runuser", "-u", account, "--", "sh", "-c", f"echo x > {target}"],
            capture_output=True,
            text=True,
        )
        assert done.returncode != 0, (target, done.stdout)


def test_a_registry_that_is_gone_fails_the_job_naming_it_and_drains_no_node(
    images,
    api,
    slurm,
    settings,
    build_image,  # noqa: F811
):
    proxy = FlakyProxy(images)
    try:
        allow(settings, proxy.address)
        ref = build_image.push("gone", entries=[("file", "/etc/gone", "x")])
        task_id = submit_task(
            api, name="img-gone", image=f"{proxy.address}/{ref}", command=["true"]
        )
        proxy.close()  # resolved at submission; nothing answers when the node pulls
        (task,) = drive([task_id], timeout=180)
    finally:
        proxy.close()
    assert task.state == "failed", task.reason
    assert proxy.address in task.reason and "pulling image" in task.reason, task.reason
    drained = [line for line in node_states().values() if re.search(r" (drain|drng)", line)]
    assert not [d for d in drained if "Prolog" in d], drained


def test_the_pull_does_not_count_against_the_walltime(images, api, slurm, settings, build_image):  # noqa: F811
    """Walltime 1 minute; a pull of ~45 s through a slow relay, then a command of 50 s: past
    the minute by far more than Slurm's 30 s between time-limit checks, yet the job completes,
    since the Prolog raised its TimeLimit by the pull's minutes. While the Prolog pulls,
    poll says "pulling image N%"."""
    big = os.urandom(1_200_000).hex()  # ~1.3 MB of layer once gzipped
    ref = build_image.push("slow", entries=[("file", "/opt/big", big)])
    proxy = FlakyProxy(images, bytes_per_s=30_000)
    try:
        allow(settings, proxy.address)
        task_id = submit_task(
            api,
            name="img-slow",
            image=f"{proxy.address}/{ref}",
            walltime="1m",
            command=["sh", "-c", "sleep 50; echo slept"],
        )
        (task,) = drive([task_id], until=lambda t: bool(t.backend_id), timeout=60)
        reasons = []
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            job = slurm.poll([task.backend_id])[task.backend_id]
            reasons.append(job.reason)
            if job.state.finished:
                break
            time.sleep(1)
        (task,) = drive([task_id], timeout=60)
    finally:
        proxy.close()
    assert job.state is JobState.SUCCEEDED, (job, reasons, output(slurm, task))
    shown = [int(m.group(1)) for r in reasons if (m := re.match(r"pulling image (\d+)%", r))]
    assert len(set(shown)) >= 2 and shown == sorted(shown), reasons
    assert job.pull is not None and job.pull.seconds >= 25, job.pull
    assert job.started_at and job.ended_at
    assert (job.ended_at - job.started_at).total_seconds() > 75, job  # sacct counts the pull
    # Its walltime plus the pull's minutes, set by the Prolog as root.
    conf = {"SLURM_CONF": str(STATE_DIR / "etc" / "slurm.conf")}
    limit = re.search(r"TimeLimit=(\S+)", scontrol(job_id(task), conf))
    minutes = 1 + math.ceil(job.pull.seconds / 60)
    assert limit and limit.group(1) == f"00:{minutes:02d}:00", (limit, job.pull)


def test_eviction_leaves_an_image_a_job_holds(images, api, slurm):
    image = f"{images}/switchyard/base:1"
    task_id = submit_task(api, name="img-held", image=image, command=["sh", "-c", "sleep 20"])
    (task,) = drive([task_id], until=lambda t: t.state == "running", timeout=120)
    job = slurm.find(task.backend_id.partition(":")[2])
    assert job is not None and job.nodes, job
    cache = STATE_DIR / "images" / job.nodes[0]
    digest = Task.objects.get(pk=task_id).spec["image_digest"]
    # As the node's cache account would to make room (root would leave files it cannot use).
    evict = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from scheduling.backends.images import ImageCache; "
        "c = ImageCache(sys.argv[2]); c.evict(cap_bytes=0); "
        "print(' '.join(i.digest for i in c.cached()))"
    )
    done = subprocess.run(
        ["/usr/sbin/runuser", "-u", "switchyard-images", "--", "/usr/bin/python3", "-I", "-c"]
        + [evict, str(ROOT), str(cache)],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    assert digest in done.stdout.split(), done
    (task,) = drive([task_id], timeout=120)
    assert task.state == "succeeded", task.reason
    # Released by the Epilog: no reservation of this job is left.
    assert not list((cache / "locks").glob(f"*.jobs/{job_id(task)}"))
