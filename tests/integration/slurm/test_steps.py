"""A multi-node job on the real Slurm: `srun` from inside the job's sandbox reaches every node
of its allocation, and an Open MPI program runs a rank on each, its `mpirun` starting its
daemons through srun (scheduling/backends/slurm/steps.py, docs/slurm.md).

`.ci/run` starts the cluster; without it these tests fail in CI and skip elsewhere. The
localhost cluster's nodes are all this machine (one hostname); each step says which node it
is through SLURMD_NODENAME.
"""

from __future__ import annotations

import shutil
import socket

import pytest

from scheduling.engine import get_backend
from tests.conftest import in_ci
from tests.integration.slurm.conftest import drive, submit_task

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

TWO_NODES = {"nodes": 2, "cpus": 2, "memory": "1Gi"}

HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  int rank, size, sum = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const char *node = getenv("SLURMD_NODENAME");
  printf("hello from rank %d of %d on %s, rank sum %d\n", rank, size, node ? node : "?", sum);
  MPI_Finalize();
  return 0;
}
"""


@pytest.fixture(autouse=True)
def multinode_host_network(cluster_site, monkeypatch):
    """The site's word that its compute nodes cannot reach the portal's services, which srun
    across nodes needs (docs/slurm.md); off by default."""
    monkeypatch.setattr(get_backend("slurm"), "multinode_host_network", True)


def run_two_node_job(api, name: str, script: str):
    task_id = submit_task(
        api,
        name=name,
        type="hpc-simulation",
        walltime="5m",
        resources=TWO_NODES,
        command=["bash", "-c", script],
    )
    (task,) = drive([task_id], timeout=180)
    return task, get_backend("slurm").log(task.backend_id)


def test_srun_inside_the_sandbox_runs_a_step_on_each_of_two_nodes(cluster_site, api):
    script = (
        "srun hostname\n"
        "srun bash -c 'echo \"step on $SLURMD_NODENAME\"'\n"
        # The batch script itself is still in its sandbox: the portal is not there.
        "test -e /proc/1/environ && grep -qa bwrap /proc/1/cmdline && echo IN-SANDBOX\n"
    )
    task, log = run_two_node_job(api, "srun-2", script)
    assert task.state == "succeeded", (task.reason, log)
    steps = sorted(line for line in log.splitlines() if line.startswith("step on "))
    assert len(steps) == 2 and len(set(steps)) == 2, log
    assert {line.removeprefix("step on ") for line in steps} <= set(cluster_site), log
    # `srun hostname`: a line from each node (all of them this machine here).
    assert log.splitlines().count(socket.gethostname()) == 2, log
    assert "IN-SANDBOX" in log, log


def test_an_open_mpi_hello_runs_two_ranks_on_two_nodes_through_mpirun(cluster_site, api):
    if shutil.which("mpicc") is None:
        message = "Open MPI is not installed (make system-deps installs openmpi-bin)"
        if in_ci():
            pytest.fail(message)
        pytest.skip(message)
    # Built inside the job, in its own folder (which every node of this cluster shares).
    # mpirun, not `srun --mpi=pmix`: this cluster's slurmds share one host, and their PMIx
    # servers would make the same folder in its /tmp (docs/slurm.md).
    script = (
        f"cat > hello.c <<'EOF'\n{HELLO_C}\nEOF\n"
        "mpicc -o hello hello.c && mpirun -np 2 --map-by node ./hello\n"
    )
    task, log = run_two_node_job(api, "mpi-2", script)
    assert task.state == "succeeded", (task.reason, log)
    hellos = sorted(line for line in log.splitlines() if line.startswith("hello from rank"))
    assert len(hellos) == 2, log
    assert hellos[0].startswith("hello from rank 0 of 2 on "), log
    assert hellos[1].startswith("hello from rank 1 of 2 on "), log
    nodes = {line.split(" on ")[1].split(",")[0] for line in hellos}
    assert len(nodes) == 2 and nodes <= set(cluster_site), log
    assert all(line.endswith("rank sum 1") for line in hellos), log
