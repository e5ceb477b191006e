"""A Slurm pre-pull's job: its sbatch argv, and the files a node's Prolog trusts (no cluster
needed; tests/integration/slurm/test_prepull.py runs them on the localhost cluster)."""

from __future__ import annotations

import os
import pwd
import stat
import textwrap

import pytest

from scheduling.backends.base import BackendError
from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm.accounts import SlurmAccounts
from scheduling.backends.slurm.commands import CommandRunner
from scheduling.backends.slurm.prepull import (
    PREPULL_ACCOUNT,
    PULL_SCRIPT,
    PullJob,
    pull_job_argv,
)
from scheduling.backends.slurmnode import prolog

JOB_ACCOUNT = "switchyard-job"  # `make test` creates it
DIGEST = "sha256:" + "ab" * 32


def test_the_pull_job_is_pinned_to_its_node_small_and_short(tmp_path):
    user = pwd.getpwnam(JOB_ACCOUNT)
    argv = pull_job_argv(
        key="prepull-0123456789abcdef",
        folder=tmp_path / "prepull-0123456789abcdef",
        node="cpu-hpc-01",
        partition="hpc",
        user=user,
        minutes=5,
        qos="normal",
    )
    assert argv[:2] == ["sbatch", "--parsable"]
    assert "--nodelist=cpu-hpc-01" in argv
    assert "--partition=hpc" in argv
    assert f"--account={PREPULL_ACCOUNT}" in argv
    assert {"--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--time=5"} <= set(argv)
    assert "--export=NONE" in argv and "--qos=normal" in argv
    # SLURM_JOB_WORK_DIR, which the Prolog reads: the job's folder under the workdir.
    assert f"--chdir={tmp_path}/prepull-0123456789abcdef" in argv
    assert argv[-2:] == [f"--uid={user.pw_name}", f"--gid={user.pw_gid}"]
    # The script runs nothing of anyone's and hides no #SBATCH directive.
    assert PULL_SCRIPT.splitlines()[1] == ":"


def test_the_backend_pre_pulls_and_keeps_its_accounts_helper():
    assert SlurmBackend.prepulls is True
    assert SlurmBackend.ensure_association is SlurmAccounts.ensure_association


@pytest.fixture
def sbatch(tmp_path):
    """A stand-in sbatch that records its argv and stdin (the real one needs the cluster)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "sbatch"
    script.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            printf '%s\\n' "$@" > {tmp_path}/argv
            cat > {tmp_path}/stdin
            echo 4242
            """)
    )
    script.chmod(0o755)
    return tmp_path


@pytest.mark.skipif(os.geteuid() != 0, reason="the image file is root's, as the portal's")
def test_the_pull_jobs_files_are_what_the_prolog_trusts(job_root, sbatch, monkeypatch):
    backend = SlurmBackend(
        "slurm",
        cluster="test",
        workdir=str(job_root / "jobs"),
        service_account=JOB_ACCOUNT,
        runner=CommandRunner(bin_dir=str(sbatch / "bin")),
    )
    job = PullJob("127.0.0.1:5000/demo/tiny:2", DIGEST, "n1", "prepull-0123456789abcdef")
    assert backend._submit_pull(job, "hpc", 3) == "4242"
    argv = (sbatch / "argv").read_text().splitlines()
    assert "--nodelist=n1" in argv and "--time=3" in argv
    assert (sbatch / "stdin").read_text() == PULL_SCRIPT
    user = pwd.getpwnam(JOB_ACCOUNT)
    folder = backend.workdir / job.key
    st = folder.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (user.pw_uid, 0o700)
    # The node's Prolog, given what slurmd gives it, takes the file as this job's image.
    monkeypatch.setenv("SLURM_JOB_WORK_DIR", str(folder))
    monkeypatch.setenv("SLURM_JOB_UID", str(user.pw_uid))
    found = prolog._image_job("4242")
    assert found is not None
    workdir, key, data = found
    assert (workdir, key) == (backend.workdir, job.key)
    assert (data["image"], data["digest"], data["uid"]) == (job.ref, DIGEST, user.pw_uid)
    assert data["walltime_min"] is None and data["command"] == ["true"]
    # Another account's job naming the same folder gets nothing pulled.
    monkeypatch.setenv("SLURM_JOB_UID", str(user.pw_uid + 1))
    assert prolog._image_job("4242") is None
    # Its files go once it is over.
    backend._remove_pull_files(job.key)
    assert not folder.exists() and not list(backend.workdir.glob(f"{job.key}*"))


def test_a_pull_job_never_runs_as_root(job_root):
    backend = SlurmBackend("slurm", cluster="test", workdir=str(job_root), service_account="root")
    with pytest.raises(BackendError, match="root"):
        backend._pull_user()
    backend.service_account = None
    with pytest.raises(BackendError, match="SWITCHYARD_SLURM_SERVICE_ACCOUNT"):
        backend._pull_user()
