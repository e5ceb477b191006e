"""The sbatch command and batch script the Slurm backend generates (no cluster needed).

The script is run with the real bash here: what the descriptor said must arrive in the
program's argv and environment byte for byte, and nothing in it may run.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from scheduling.backends import SubmitRequest
from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm.parse import _exit_code
from scheduling.decisions.types import QueuePolicy
from scheduling.spec import Resources, TaskSpec

# The account jobs run as when the researcher has none (`make test` creates it).
JOB_ACCOUNT = "switchyard-job"
HOSTILE = ["$(id)", "`id`", "a; touch /tmp/pwned", "x\n#SBATCH --account=other", "'\"", "*"]

TRAINING = QueuePolicy(
    name="training",
    pool="gpu-train",
    task_types=("ai-training",),
    allocation="whole-node",
    requires_estimate=True,
)
HPC = QueuePolicy(
    name="hpc", pool="cpu-hpc", task_types=("hpc-simulation",), max_walltime_s=72 * 3600
)


def request(
    spec: TaskSpec, queue: QueuePolicy = HPC, type_: str = "hpc-simulation", key: str = "sy-1-1"
) -> SubmitRequest:
    return SubmitRequest(
        key=key, spec=spec, type=type_, queue=queue, project="materials", user="alice"
    )


@pytest.fixture
def backend(job_root) -> SlurmBackend:
    return SlurmBackend(
        "slurm", cluster="test", workdir=str(job_root / "jobs"), service_account=JOB_ACCOUNT
    )


def test_hostile_arguments_and_env_values_arrive_verbatim_and_run_nothing(backend):
    # Where the job could write, if anything in its descriptor ran: its own folder.
    marker = backend.workdir / "sy-1-1" / "pwned"
    hostile = [*HOSTILE, f"$(touch {marker})"]
    echo = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['GREETING'], os.environ['MULTI']]))"
    spec = TaskSpec(
        name="x",
        project="materials",
        command=("/usr/bin/python3", "-c", echo, *hostile),
        env=(("GREETING", f"$(touch {marker})"), ("MULTI", "a\nb`id`")),
    )
    _, script = backend.sbatch_command(request(spec))
    # As slurmd would run it: as the job's account (setpriv does what its setuid does).
    as_job = ["setpriv", f"--reuid={JOB_ACCOUNT}", f"--regid={JOB_ACCOUNT}", "--clear-groups"]
    done = subprocess.run(
        [*as_job, "bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    argv, greeting, multi = json.loads(done.stdout)
    assert argv == hostile
    assert (greeting, multi) == (f"$(touch {marker})", "a\nb`id`")
    assert not marker.exists()


def test_a_slurm_jobs_tmpfs_mounts_are_bounded_by_its_memory_request(backend):
    """tmpfs is memory: /tmp and /dev/shm hold at most the request; nothing else of the
    sandbox's memory-backed folders (its root, /dev, the tmpfs over the other jobs) takes
    a file."""
    probe = (
        f"for d in / /dev {backend.workdir}; do "
        "(head -c 1M /dev/zero > $d/fill) 2>/dev/null && echo WROTE $d; done; "
        "df --output=size,target -B1M /tmp /dev/shm | tail -n +2; echo done"
    )
    spec = TaskSpec(
        name="x",
        project="materials",
        resources=Resources(memory_mib=100),
        command=("bash", "-c", probe),
    )
    _, script = backend.sbatch_command(request(spec))
    as_job = ["setpriv", f"--reuid={JOB_ACCOUNT}", f"--regid={JOB_ACCOUNT}", "--clear-groups"]
    done = subprocess.run(
        [*as_job, "bash", "-c", script],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.split() == ["100", "/tmp", "100", "/dev/shm", "done"], done


def test_secret_env_reaches_the_job_but_not_the_script_slurm_keeps_nor_other_accounts(backend):
    import pwd
    import stat

    secret = "sk-live-$(id)-'quoted'"
    show = "import os; print(os.environ['API_KEY'])"
    spec = TaskSpec(
        name="x",
        project="materials",
        command=("/usr/bin/python3", "-c", show),
        secret_env=(("API_KEY", secret),),
    )
    _, script = backend.sbatch_command(request(spec))
    # The script is what sbatch reads, Slurm stores and `scontrol write batch_script` shows.
    assert secret not in script and "sk-live" not in script
    held = backend.workdir / "sy-1-1" / ".secret-env"
    account = pwd.getpwnam(JOB_ACCOUNT)
    info, folder = held.stat(), held.parent.stat()
    assert stat.S_IMODE(info.st_mode) == 0o400 and info.st_uid == account.pw_uid
    assert stat.S_IMODE(folder.st_mode) == 0o700 and folder.st_uid == account.pw_uid
    as_job = ["setpriv", f"--reuid={JOB_ACCOUNT}", f"--regid={JOB_ACCOUNT}", "--clear-groups"]
    done = subprocess.run(
        [*as_job, "bash", "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout == secret + "\n"
    other = pwd.getpwnam("nobody")
    peek = subprocess.run(
        [
            "setpriv",
            f"--reuid={other.pw_uid}",
            f"--regid={other.pw_gid}",
            "--clear-groups",
            "cat",
            str(held),
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert peek.returncode != 0 and secret not in peek.stdout


def test_no_sbatch_directive_is_read_from_a_users_script(backend):
    spec = TaskSpec(name="x", project="materials", script="#SBATCH --account=other\necho hi\n")
    _, script = backend.sbatch_command(request(spec))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash" and lines[1] == ":"  # a command ends directive parsing
    assert "#SBATCH" not in script  # the body is a separate file, the job's to read only
    body = Path(backend.workdir / "sy-1-1" / "script.sh")
    assert body.read_text().startswith("#SBATCH") and oct(body.stat().st_mode & 0o777) == "0o500"


def test_account_partition_and_limits_go_on_the_command_line(backend):
    spec = TaskSpec(
        name="t",
        project="materials",
        command=("python", "train.py"),
        resources=Resources(nodes=4, gpus=32, cpus=256, memory_mib=512 * 1024),
        walltime_s=10 * 3600,
        estimate_s=8 * 3600 + 1,
    )
    argv, _ = backend.sbatch_command(request(spec, TRAINING, "ai-training"))
    for option in (
        "--partition=training",
        "--account=materials",
        "--export=NONE",
        "--job-name=sy-1-1",
        "--nodes=4",
        "--gres=gpu:8",
        "--exclusive",
        "--time=600",
        "--mem=524288M",
        "--dependency=singleton",
        "--ntasks-per-node=64",
        "--switches=1@10",  # under one leaf switch if one frees within 10 minutes
    ):
        assert option in argv, option
    # The estimate is never a --time-min: Slurm 22.05 may cut the job at it.
    assert not [a for a in argv if a.startswith("--time-min")]


def test_a_task_that_fits_on_a_lease_may_also_run_in_its_partition(backend):
    spec = TaskSpec(
        name="t",
        project="materials",
        command=("true",),
        resources=Resources(nodes=1, gpus=4, cpus=8),
        walltime_s=1800,
    )
    lent = request(spec, TRAINING, "ai-training")
    lent = SubmitRequest(
        **{
            **{f: getattr(lent, f) for f in lent.__dataclass_fields__},
            "extra": {"lease_partitions": "lease-3,lease-9"},
        }
    )
    argv, _ = backend.sbatch_command(lent)
    assert "--partition=training,lease-3,lease-9" in argv
    assert not [a for a in argv if a.startswith("--switches")]  # one node: no switch to ask


def test_a_single_process_task_asks_one_node_and_cpus_per_task(backend):
    spec = TaskSpec(
        name="a", project="materials", command=("true",), resources=Resources(cpus=2, gpus=1)
    )
    argv, _ = backend.sbatch_command(request(spec, HPC, "ai-inference"))
    assert {"--nodes=1", "--ntasks=1", "--cpus-per-task=2", "--gres=gpu:1"} <= set(argv)


def test_a_gpu_model_asked_for_is_a_constraint_on_the_nodes_features(backend):
    spec = TaskSpec(
        name="a",
        project="materials",
        command=("true",),
        resources=Resources(cpus=2, gpus=1, gpu_type="L40S"),
    )
    argv, _ = backend.sbatch_command(request(spec, HPC, "ai-inference"))
    assert {"--gres=gpu:1", "--constraint=L40S"} <= set(argv)
    spec = TaskSpec(name="a", project="materials", command=("true",), resources=Resources(gpus=1))
    argv, _ = backend.sbatch_command(request(spec, HPC, "ai-inference"))
    assert not [a for a in argv if a.startswith("--constraint")]  # any model will do


def test_an_environment_name_outside_the_allowlist_is_refused(backend):
    from scheduling.backends import BackendError

    spec = TaskSpec(name="a", project="materials", command=("true",), env=(("bad name", "x"),))
    with pytest.raises(BackendError):
        backend.sbatch_command(request(spec))


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ({"return_code": 3, "status": "FAILED"}, 3),
        ({"return_code": 0, "status": "SUCCESS"}, 0),
        ({"return_code": 0, "signal": {"signal_id": 9}}, 137),
        (768, 3),  # squeue's wait status: 3 << 8
        (9, 137),  # killed by SIGKILL
        (None, None),
    ],
)
def test_exit_codes_are_read_from_both_json_forms(raw, code):
    assert _exit_code(raw) == code


def test_jobs_run_as_the_service_account_with_its_own_group_never_as_root(backend):
    import pwd

    spec = TaskSpec(name="x", project="materials", command=("true",))
    argv, _ = backend.sbatch_command(request(spec))
    account = pwd.getpwnam(JOB_ACCOUNT)
    # --gid too: sbatch run by root with --uid alone gives the job root's group.
    assert f"--uid={JOB_ACCOUNT}" in argv and f"--gid={account.pw_gid}" in argv


def test_a_researchers_own_account_is_used_and_root_is_refused(backend):
    from scheduling.backends import BackendError

    spec = TaskSpec(name="x", project="materials", command=("true",))
    mine = SubmitRequest(
        key="sy-1-1",
        spec=spec,
        type="hpc-simulation",
        queue=HPC,
        project="materials",
        user="alice",
        extra={"run_as": "sy-alice"},
    )
    argv, _ = backend.sbatch_command(mine)
    assert "--uid=sy-alice" in argv
    as_root = SubmitRequest(
        key="sy-1-2",
        spec=spec,
        type="hpc-simulation",
        queue=HPC,
        project="materials",
        user="alice",
        extra={"run_as": "root"},
    )
    with pytest.raises(BackendError, match="refusing to run a job as 'root'"):
        backend.sbatch_command(as_root)
    nobody = SlurmBackend("slurm", cluster="test", workdir=str(backend.workdir))
    with pytest.raises(BackendError, match="no Unix account to run the job as"):
        nobody.sbatch_command(request(spec))


def test_the_cpu_watcher_runs_isolated_and_ends_as_its_command_did(tmp_path):
    """It ignores the job's PYTHON* variables and files, and keeps the exit status or the
    signal (scheduling/backends/slurm/watch.py)."""
    import signal
    import subprocess

    from scheduling.backends.slurm.watch import WATCHER, read_usage

    (tmp_path / "usercustomize.py").write_text("raise SystemExit(42)\n")
    (tmp_path / "subprocess.py").write_text("raise SystemExit(43)\n")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONINSPECT": "1",
        "PYTHONUSERBASE": str(tmp_path),
        "PYTHONPATH": str(tmp_path),
    }
    out = tmp_path / "cpu"

    def run(command: str) -> int:
        line = ["python3", "-I", "-S", "-c", WATCHER, str(out), "none", "sh", "-c", command]
        return subprocess.run(line, cwd=tmp_path, env=env, timeout=30).returncode

    assert run("exit 3") == 3
    assert run("kill -9 $$") == -signal.SIGKILL
    assert run("kill -TERM $$") == -signal.SIGTERM
    # 2 s of CPU time, counted by the child itself (a wall-clock loop gets less under load).
    # The watcher samples twice a second, so it misses what the job used after its last
    # sample: half a second's worth when it runs on time, more when a loaded machine holds
    # it back (0.8 s once read as 380 ms). Half of it is the floor.
    busy = "python3 -I -S -c 'import time\nwhile time.process_time() < 2: pass'"
    assert run(busy) == 0 and read_usage(str(out)) >= 1000
