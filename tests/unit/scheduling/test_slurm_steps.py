"""What a Slurm job's sandbox gets so that `srun` works in it (slurm/steps.py); the real
`srun` and MPI run in tests/integration/slurm/test_steps.py."""

from __future__ import annotations

import dataclasses

import pytest

from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm.steps import MUNGE_SOCKET, munge_socket
from scheduling.spec import Resources, TaskSpec
from tests.unit.scheduling.test_slurm_script import JOB_ACCOUNT, request


@pytest.fixture
def cluster(tmp_path):
    """A slurm.conf naming a munge socket in a folder of its own."""
    etc, munge = tmp_path / "etc", tmp_path / "munge"
    etc.mkdir()
    munge.mkdir()
    conf = etc / "slurm.conf"
    conf.write_text(f"ClusterName=x\nAuthType=auth/munge\nAuthInfo=socket={munge}/munge.socket\n")
    return conf, munge


def backend_for(job_root, conf, *, host_network: bool = True) -> SlurmBackend:
    return SlurmBackend(
        "slurm",
        cluster="test",
        workdir=str(job_root / "jobs"),
        service_account=JOB_ACCOUNT,
        slurm_conf=str(conf),
        multinode_host_network=host_network,
    )


def spec(nodes: int | None) -> TaskSpec:
    return TaskSpec(
        name="x",
        project="materials",
        command=("srun", "hostname"),
        resources=Resources(cpus=2, nodes=nodes),
    )


def test_the_munge_socket_is_read_from_slurm_conf_or_is_munges_default(cluster, tmp_path):
    conf, munge = cluster
    assert munge_socket(str(conf)) == f"{munge}/munge.socket"
    assert munge_socket(str(tmp_path / "missing.conf")) == MUNGE_SOCKET
    assert munge_socket(None) == MUNGE_SOCKET


@pytest.mark.parametrize("nodes", [None, 1, 2])
def test_every_job_sees_the_configuration_and_munge_read_only(job_root, cluster, nodes):
    conf, munge = cluster
    _, script = backend_for(job_root, conf).sbatch_command(request(spec(nodes)))
    assert f"export SLURM_CONF={conf}" in script
    assert f"--ro-bind {conf.parent} {conf.parent}" in script
    assert f"--ro-bind {munge} {munge}" in script
    assert f"--bind {munge} " not in script


def test_only_a_multi_node_batch_job_shares_its_nodes_network(job_root, cluster):
    conf, _ = cluster
    backend = backend_for(job_root, conf)
    _, one = backend.sbatch_command(request(spec(1)))
    _, two = backend.sbatch_command(request(spec(2)))
    assert "--share-net" not in one and "--share-net" in two
    # The watcher connects no slirp4netns network for it: it has the node's.
    assert " none bwrap " in two and " none bwrap " not in one
    # Agent and sandbox tasks never get a network, whatever they ask for.
    agent = dataclasses.replace(request(spec(2)), type="agent")
    _, script = backend.sbatch_command(agent)
    assert "--share-net" not in script


def test_without_the_sites_word_a_multi_node_job_keeps_a_network_of_its_own(job_root, cluster):
    # The default: nothing a job runs may reach the portal's services.
    conf, _ = cluster
    _, two = backend_for(job_root, conf, host_network=False).sbatch_command(request(spec(2)))
    assert "--share-net" not in two and " none bwrap " not in two
