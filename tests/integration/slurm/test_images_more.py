"""Tasks in images on the localhost Slurm cluster, beside tests/integration/images/'s on the
local backend (docs/containers.md, "Slurm notes"): a task in an image sees exactly its GPUs
and its storage areas, two tasks in different images run side by side, a registry that goes
away mid-pull fails that attempt and the engine's retry pulls once it is back, and the
isolation probes hold inside an image for every type. Needs the cluster and the registry.
"""

from __future__ import annotations

import os
import pwd

import pytest

from scheduling.engine import get_backend
from scheduling.models import Attempt
from tests import netprobe
from tests.integration.images.conftest import (  # noqa: F401 (fixtures)
    FlakyProxy,
    build_image,
    registry,
)
from tests.integration.images.test_run_local import listener, probe  # noqa: F401 (fixture)
from tests.integration.slurm.conftest import drive, submit_task
from tests.integration.slurm.test_devices import SHOW, sees_exactly_its_gpus
from tests.integration.slurm.test_images import allow, images, output  # noqa: F401 (fixture)
from tests.integration.slurm.test_jobs import PROBE_FIELDS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slurm,
    pytest.mark.registry,
    pytest.mark.django_db(transaction=True),
]

BASE = "switchyard/base:1"


@pytest.fixture(scope="module")
def any_type(build_image):  # noqa: F811
    """The base image under a name outside the demo catalogue (which keeps switchyard/base
    for agent types): any type may run it, through the registry's `any_image`."""
    return build_image.push("any-type", entries=[("file", "/etc/any-type", "yes")])


def test_a_task_in_an_image_sees_exactly_its_gpus(images, cluster_site, api, any_type):  # noqa: F811
    holder = submit_task(
        api,
        name="img-holder",
        type="ai-inference",
        walltime="5m",
        resources={"cpus": 1, "gpus": 1},
        command=["sleep", "120"],
    )
    drive([holder], until=lambda t: t.state == "running", timeout=120)
    ours = submit_task(
        api,
        name="img-gpus",
        type="ai-inference",
        image=f"{images}/{any_type}",
        walltime="5m",
        resources={"cpus": 1, "gpus": 2},
        command=["sh", "-c", SHOW],
    )
    [task] = drive([ours], timeout=180)
    log = output(get_backend("slurm"), task)
    assert task.state == "succeeded", (task.reason, log)
    sees_exactly_its_gpus(log, 2)


def test_a_task_in_an_image_sees_its_pools_areas_and_works_in_its_own_folder(
    images,  # noqa: F811
    api,
    alice_account,
    storage_root,
):
    projects, datasets = storage_root / "projects", storage_root / "datasets"
    script = (
        'echo "pwd=$(pwd)"; cat /etc/switchyard/image; '
        f"echo made > {projects}/materials/by-job && echo PROJECT-WRITABLE; "
        f"echo made > {storage_root}/home/alice/by-job && echo HOME-WRITABLE; "
        f"echo made > {datasets}/by-job 2>/dev/null && echo DATASETS-WRITABLE; "
        f"test -d {datasets} && echo DATASETS-SEEN; "
        f'echo "listed=$(ls {projects})"; echo result > result.txt'
    )
    pk = submit_task(api, name="img-areas", image=f"{images}/{BASE}", command=["sh", "-c", script])
    [task] = drive([pk], timeout=180)
    log = output(get_backend("slurm"), task)
    assert task.state == "succeeded", (task.reason, log)
    assert "switchyard-base" in log, log  # in its image
    assert "PROJECT-WRITABLE" in log and "HOME-WRITABLE" in log, log
    assert "DATASETS-SEEN" in log and "DATASETS-WRITABLE" not in log, log
    assert "listed=materials\n" in log, log
    workdir = projects / "materials" / "tasks" / str(pk)
    assert f"pwd={workdir}" in log, log
    result = workdir / "result.txt"
    assert result.read_text() == "result\n"
    assert result.stat().st_uid == pwd.getpwnam("sy-alice").pw_uid


def test_two_tasks_in_different_images_run_side_by_side(images, api):  # noqa: F811
    show = "cat /etc/switchyard/image; cat /etc/os-release | grep ^ID=; sleep 10"
    ids = [
        submit_task(api, name=f"img-side-{n}", image=f"{images}/{image}", command=cmd)
        for n, (image, cmd) in enumerate(
            [
                (BASE, ["sh", "-c", show]),
                ("switchyard/python:3", ["python3", "-c", PYTHON_SHOW]),
            ]
        )
    ]
    both = drive(ids, until=lambda t: t.state == "running" or t.is_terminal, timeout=180)
    assert all(t.state == "running" for t in both), [(t.state, t.reason) for t in both]
    base, python = drive(ids, timeout=120)
    slurm = get_backend("slurm")
    base_log, python_log = output(slurm, base), output(slurm, python)
    assert base.state == "succeeded" and python.state == "succeeded", (base_log, python_log)
    assert "switchyard-base:1" in base_log and "ID=switchyard-base" in base_log, base_log
    assert "switchyard-python:3" in python_log, python_log
    assert "ID=switchyard-python" in python_log and "switchyard-base" not in python_log


PYTHON_SHOW = (
    "import time; print(open('/etc/switchyard/image').read().strip()); "
    "print([l for l in open('/etc/os-release') if l.startswith('ID=')][0].strip()); "
    "time.sleep(10)"
)


def test_a_registry_gone_mid_pull_fails_the_attempt_and_the_retry_pulls_when_it_is_back(
    images,  # noqa: F811
    api,
    settings,
    build_image,  # noqa: F811
):
    """An image no node has cached (a fresh ~3 MB layer) through a relay cut after 1 MB."""
    big = os.urandom(1_500_000).hex()
    ref = build_image.push("cut", entries=[("file", "/opt/big", big)])
    proxy = FlakyProxy(images)
    try:
        allow(settings, proxy.address)
        pk = submit_task(
            api,
            name="img-cut",
            image=f"{proxy.address}/{ref}",
            retry_count=1,
            command=["sh", "-c", "wc -c < /opt/big"],
        )
        proxy.cut_after(1 << 20)
        drive([pk], until=lambda t: t.attempts >= 1 and t.state == "pending", timeout=180)
        assert proxy.cut
        proxy.restore()
        [task] = drive([pk], timeout=180)
    finally:
        proxy.close()
    first, second = Attempt.objects.filter(task_id=pk).order_by("number")
    assert first.reason.startswith(f"pulling image {proxy.address}/{ref}"), first.reason
    assert "failed" in first.reason, first.reason
    log = output(get_backend("slurm"), task)
    assert task.state == "succeeded", (task.reason, log)
    assert log.split()[-1] == str(len(big)), log
    assert second.pull_seconds is not None and second.pull_bytes, second


@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_isolation_probes_hold_inside_an_image_for_every_type_on_slurm(
    images,  # noqa: F811
    api,
    settings,
    listener,  # noqa: F811
    any_type,
):
    """As tests/integration/images/test_run_local.py's probe on the local backend, in the
    base image's busybox; agent and sandbox jobs have no interface but their loopback and
    do not reach the test host, which the batch types reach through slirp4netns."""
    network = (
        "echo \"ifaces=$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ,)\"\n"
        "timeout 5 nc {host} {port} </dev/null 2>/dev/null\n"
    )
    account = pwd.getpwnam(settings.SWITCHYARD_JOB_ACCOUNT)
    with netprobe.test_host() as host:
        ids = {
            kind: submit_task(
                api,
                name=f"img-probe-{kind.split('-')[-1]}",
                type=kind,
                walltime="5m",
                image=f"{images}/{any_type}",
                command=[
                    "sh",
                    "-c",
                    network.format(host=host.reachable, port=netprobe.TEST_PORT) + probe(listener),
                ],
                **fields,
            )
            for kind, fields in PROBE_FIELDS.items()
        }
        done = {t.type: t for t in drive(list(ids.values()), timeout=300)}
    for kind, task in done.items():
        log = output(get_backend("slurm"), task)
        assert task.state == "succeeded", (kind, task.reason, log)
        assert f"uid={account.pw_uid}\n" in log, (kind, log)
        assert "CapEff:\t0000000000000000" in log and "CapPrm:\t0000000000000000" in log
        for leak in ("REMOUNTED", "WROTE-", "SAW-", "NESTED-USERNS", "NETWORK"):
            assert leak not in log, (kind, log)
        assert log.rstrip().endswith("done"), (kind, log)
        if kind in ("agent", "sandbox"):
            assert "ifaces=lo,\n" in log and netprobe.GREETING not in log, (kind, log)
        else:
            assert netprobe.GREETING in log, (kind, log)  # the probe can find a network


def test_the_metered_usage_of_a_slurm_attempt_leaves_its_pull_out(
    images,  # noqa: F811
    api,
    settings,
    build_image,  # noqa: F811
):
    """sacct's elapsed time runs from the Prolog's start, the pull included; the records
    charge allocated × (elapsed − the attempt's pull_seconds) (docs/accounting.md)."""
    from accounting.meter import meter
    from accounting.models import UsageRecord
    from tests.integration.conftest import wait_for

    ref = build_image.push("metered", entries=[("file", "/opt/big", os.urandom(600_000).hex())])
    proxy = FlakyProxy(images, bytes_per_s=100_000)  # ~7 s to pull its fresh layer
    try:
        allow(settings, proxy.address)
        pk = submit_task(
            api,
            name="img-metered",
            image=f"{proxy.address}/{ref}",
            resources={"cpus": 2},
            command=["sleep", "3"],
        )
        [task] = drive([pk], timeout=180)
    finally:
        proxy.close()
    assert task.state == "succeeded", task.reason
    attempt = Attempt.objects.get(task_id=pk)
    assert attempt.pull_seconds is not None and attempt.pull_seconds >= 4, attempt.pull_seconds
    wait_for(lambda: meter([attempt.pk]), timeout=60, what="sacct to account the job", step=1)
    [run] = get_backend("slurm").usage([attempt.backend_id])[attempt.backend_id]
    # sacct keeps whole seconds: the pull and the 3 s sleep, less at most the second it cut.
    assert run.pull_in_elapsed and run.elapsed_ms > attempt.pull_seconds * 1000 + 2000, run
    cpu = UsageRecord.objects.get(attempt=attempt, metric="cpu").quantity
    assert cpu == 2 * (run.elapsed_ms - round(attempt.pull_seconds * 1000)), (cpu, run, attempt)
