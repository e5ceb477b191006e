"""On the localhost Slurm: a job sees exactly the GPUs Slurm gave it, under their own names.

The cluster's GPUs are character devices docker/slurm/cluster.sh makes from gres.conf, each
with numbers of its own; the site's pools name them as their device files. The job runs
through a real sbatch, in its sandbox, and reports what it sees there.
"""

from __future__ import annotations

import os

import pytest

from scheduling.engine import get_backend
from scheduling.sites.slurm import ClusterSettings
from tests.integration.slurm.conftest import STATE_DIR, drive, submit_task

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

CONTROL = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
SHOW = (
    'echo "given=$SLURM_JOB_GPUS node=$SLURMD_NODENAME"; ls /dev; echo ---; '
    'for f in /dev/nvidia*; do [ -e "$f" ] && echo "$f $(stat -c %t:%T $f)"; done; '
    'echo "cuda=$CUDA_VISIBLE_DEVICES"'
)


def numbers(path: str) -> str:
    rdev = os.stat(path).st_rdev
    return f"{os.major(rdev):x}:{os.minor(rdev):x}"


def test_a_2_gpu_job_sees_exactly_the_2_gpus_slurm_gave_it(cluster_site, api):
    # Another job holds one GPU of the node: ours are not simply the first two.
    holder = submit_task(
        api,
        name="holder",
        type="ai-inference",
        walltime="5m",
        resources={"cpus": 1, "gpus": 1},
        command=["sleep", "120"],
    )
    drive([holder], until=lambda t: t.state == "running")
    ours = submit_task(
        api,
        name="ours",
        type="ai-inference",
        walltime="5m",
        resources={"cpus": 1, "gpus": 2},
        command=["sh", "-c", SHOW],
    )
    [task] = drive([ours])
    log = get_backend("slurm").log(task.backend_id)
    assert task.state == "succeeded", (task.reason, log)
    sees_exactly_its_gpus(log, 2)


def sees_exactly_its_gpus(log: str, count: int) -> None:
    """`log` (SHOW's output) lists exactly the GPUs Slurm gave the job, as their own device
    files, and the control devices: no GPU bound twice, none standing in for another."""
    cluster = ClusterSettings(state_dir=str(STATE_DIR))
    head, _, rest = log.partition("\n")
    given = head.split("given=")[1].split()[0].split(",")
    node = head.split("node=")[1].strip()
    assert len(given) == count and node.startswith("inf"), log
    listing, _, rest = rest.partition("---\n")
    assert sorted(name for name in listing.split() if name.startswith("nvidia")) == sorted(
        [*(f"nvidia{g}" for g in given), *CONTROL]
    ), log
    files = dict(line.split() for line in rest.splitlines() if line.startswith("/dev/"))
    assert files == {
        **{f"/dev/nvidia{g}": numbers(cluster.device(node, int(g))) for g in given},
        **{f"/dev/{name}": numbers(f"{STATE_DIR}/dev/{name}") for name in CONTROL},
    }, log
    assert len(set(files.values())) == len(files)
    assert rest.split("cuda=")[1].strip() == ",".join(str(i) for i in range(count)), log
