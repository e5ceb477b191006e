"""A Slurm job in its image, on one node without Slurm (docs/containers.md, "Slurm notes"):
the backend's real batch script and the node's real Prolog and Epilog wrappers, run as slurmd
would run them (root, Slurm's variables only), against the test registry and real bubblewrap
with the job's real account. tests/integration/slurm/test_images.py does the same through
the localhost cluster."""

from __future__ import annotations

import dataclasses
import json
import os
import pwd
import subprocess
from pathlib import Path

import pytest

from scheduling.backends.slurm import SlurmBackend
from scheduling.backends.slurm.imagejob import IMAGE_EXIT, pull_path, read_pulls
from tests.conftest import ROOT, in_ci

pytestmark = [pytest.mark.registry, pytest.mark.integration]
if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("a Prolog runs as root, jobs as other accounts"))

JOB_ACCOUNT = "switchyard-job"
CACHE_ACCOUNT = "nobody"  # any account but the job's and root; the cluster has its own
JOB_ID = "4242"


@dataclasses.dataclass
class Node:
    """One node: its image cache and its Prolog/Epilog wrappers (docker/slurm/cluster.sh's)."""

    root: Path
    name: str = "n1"

    @property
    def cache(self) -> Path:
        return self.root / "images" / self.name

    def wrapper(self, kind: str) -> str:
        return str(self.root / "etc" / f"switchyard-{kind}")

    def slurmd_env(self, workdir: Path, key: str, job_id: str = JOB_ID) -> dict[str, str]:
        user = pwd.getpwnam(JOB_ACCOUNT)
        return {
            "SLURM_JOB_ID": job_id,
            "SLURM_JOB_UID": str(user.pw_uid),
            "SLURM_JOB_GID": str(user.pw_gid),
            "SLURM_JOB_WORK_DIR": str(workdir / key),
            "SLURMD_NODENAME": self.name,
            "SLURM_CONF": "/nonexistent/slurm.conf",  # no TimeLimit to raise: no walltime
        }

    def prolog(self, workdir: Path, key: str, job_id: str = JOB_ID) -> int:
        env = self.slurmd_env(workdir, key, job_id)
        return subprocess.run(["sh", self.wrapper("prolog")], env=env, timeout=300).returncode

    def epilog(self, job_id: str = JOB_ID) -> int:
        env = {"SLURM_JOB_ID": job_id, "SLURMD_NODENAME": self.name}
        return subprocess.run(["sh", self.wrapper("epilog")], env=env, timeout=60).returncode


@pytest.fixture
def node(job_root) -> Node:
    """The wrappers as cluster.sh writes them, for a node cache under the test's root."""
    node = Node(job_root / "node")
    (node.root / "etc").mkdir(parents=True)
    node.root.chmod(0o755)  # the cache account passes through to its cache
    (node.root / "etc" / "nodes.txt").write_text(f"{node.name} 1\n")
    function = subprocess.run(
        ["sed", "-n", "/^setup_images()/,/^}/p", str(ROOT / "docker/slurm/cluster.sh")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    script = (
        f'say() {{ echo "$@"; }}; fail() {{ echo "$@" >&2; exit 1; }}\n{function}\nsetup_images\n'
    )
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "STATE": str(node.root),
        "ETC": str(node.root / "etc"),
        "ROOT": str(ROOT),
        "IMAGE_ACCOUNT": CACHE_ACCOUNT,
        "PULL_TIMEOUT": "120",
        "IMAGE_CACHE_MB": "4096",
    }
    subprocess.run(["bash", "-c", script], env=env, check=True, capture_output=True)
    return node


@pytest.fixture
def slurm(job_root) -> SlurmBackend:
    return SlurmBackend(
        "slurm", cluster="test", workdir=str(job_root / "jobs"), service_account=JOB_ACCOUNT
    )


def batch(slurm: SlurmBackend, node: Node, req, job_id: str = JOB_ID) -> tuple[int, str]:
    """The job's batch script, run as slurmd's batch step would: its account, Slurm's env."""
    _, script = slurm.sbatch_command(req)
    path = slurm.workdir / f"{req.key}.sh"
    path.write_text(script)
    path.chmod(0o644)
    env = {
        "PATH": "/usr/bin:/bin",
        "SLURM_JOB_ID": job_id,
        "SLURMD_NODENAME": node.name,
    }
    done = subprocess.run(
        ["/usr/sbin/runuser", "-u", JOB_ACCOUNT, "--", "bash", str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    return done.returncode, done.stdout + done.stderr


def test_the_prolog_pulls_and_the_batch_script_runs_the_command_in_the_image(slurm, node, in_image):
    host_only = next(p for p in ("/usr/bin/perl", "/usr/bin/dpkg") if Path(p).exists())
    script = (
        "cat /etc/os-release; cat /etc/switchyard/image; "
        f"test -e {host_only} && echo HOST-USR || echo NO-HOST-USR"
    )
    req = in_image("switchyard/base:1", "sy-img-1", ["sh", "-c", script], type="agent")
    rc, out = batch(slurm, node, req)  # no Prolog yet: the script refuses to start
    assert rc == IMAGE_EXIT and "did not pull the job's image" in out, out

    assert node.prolog(slurm.workdir, req.key) == 0
    pulls = read_pulls(slurm.workdir, req.key, JOB_ID)
    assert [p["state"] for p in pulls] == ["ready"], pulls
    assert pulls[0]["bytes"] > 0 and pulls[0]["seconds"] > 0
    rc, out = batch(slurm, node, req)
    assert rc == 0, out
    assert "ID=switchyard-base" in out and "switchyard-base:1" in out, out
    assert "NO-HOST-USR" in out, out

    # The cache is the cache account's: the job's account can write none of it.
    attempts = [
        f"{node.cache}/images/x",
        f"{node.cache}/blobs/sha256/x",
        f"{node.cache}/locks/x",
        str(next((node.cache / "images").iterdir()) / "rootfs" / "etc" / "x"),
        str(pull_path(slurm.workdir, req.key, node.name)),
        str(pull_path(slurm.workdir, "sy-other-1", node.name)),
    ]
    for target in attempts:
        touch = subprocess.run(
            ["/usr/sbin/runuser", "-u", JOB_ACCOUNT, "--", "sh", "-c", f"echo x > {target}"],
            capture_output=True,
            text=True,
        )
        assert touch.returncode != 0 and "denied" in touch.stderr.lower(), (target, touch)

    # Held for the job until its Epilog.
    held = list((node.cache / "locks").glob(f"*.jobs/{JOB_ID}"))
    assert len(held) == 1
    assert node.epilog() == 0
    assert not list((node.cache / "locks").glob(f"*.jobs/{JOB_ID}"))


def test_the_images_entrypoint_cmd_env_and_workdir_are_honoured(slurm, node, in_image):
    req = in_image("demo/tiny:2", "sy-img-2", type="agent")
    slurm.sbatch_command(req)  # the portal writes the image file at submission
    assert node.prolog(slurm.workdir, req.key) == 0
    rc, out = batch(slurm, node, req)
    assert rc == 0, out
    assert "2" in out.split(), out
    # A command: after the Entrypoint, in place of the Cmd; the image's Env (set inside the
    # sandbox, under the task's own) and WorkingDir.
    shell = 'echo "v=$DEMO_VERSION pwd=$(pwd) mine=$MINE"'
    req = in_image(
        "demo/tiny:1", "sy-img-5", ["sh", "-c", shell], type="agent", env={"MINE": "yes"}
    )
    slurm.sbatch_command(req)
    assert node.prolog(slurm.workdir, req.key) == 0
    rc, out = batch(slurm, node, req)
    assert rc == 0, out
    assert "v=1 pwd=/srv/demo mine=yes" in out, out


def test_a_pull_file_of_another_job_or_an_image_file_of_another_account_is_ignored(
    slurm, node, in_image
):
    req = in_image("switchyard/base:1", "sy-img-3", ["true"], type="agent")
    slurm.sbatch_command(req)
    # Another job id on this node: the Prolog wrote the file for job 1, not for 4242.
    assert node.prolog(slurm.workdir, req.key, job_id="1") == 0
    rc, out = batch(slurm, node, req)
    assert rc == IMAGE_EXIT and "another job's" in out, out
    assert read_pulls(slurm.workdir, req.key, JOB_ID) == []
    # A job of another account pointing its work folder at this job's: nothing is pulled.
    env = node.slurmd_env(slurm.workdir, req.key, job_id="7")
    env["SLURM_JOB_UID"] = "0"
    os.unlink(pull_path(slurm.workdir, req.key, node.name))
    assert subprocess.run(["sh", node.wrapper("prolog")], env=env).returncode == 0
    assert not pull_path(slurm.workdir, req.key, node.name).exists()


def test_a_registry_that_does_not_answer_fails_the_job_not_the_node(slurm, node, in_image):
    req = in_image("switchyard/base:1", "sy-img-4", ["true"], type="agent")
    # The same image from a registry where nothing listens (an unused port).
    gone = dataclasses.replace(
        req.spec, image="127.0.0.1:9/switchyard/base:1", image_digest=req.spec.image_digest
    )
    req = dataclasses.replace(req, spec=gone)
    slurm.sbatch_command(req)
    assert node.prolog(slurm.workdir, req.key) == 0  # 0: slurmd does not drain the node
    (pull,) = read_pulls(slurm.workdir, req.key, JOB_ID)
    assert pull["state"] == "failed" and "127.0.0.1:9" in pull["reason"], pull
    rc, out = batch(slurm, node, req)
    assert rc == IMAGE_EXIT and "127.0.0.1:9" in out, out
    data = json.loads(pull_path(slurm.workdir, req.key, node.name).read_text())
    assert data["job_id"] == JOB_ID


def test_only_a_node_that_cannot_pull_at_all_fails_its_prolog(slurm, node, in_image):
    """Exit 1 (slurmd drains the node, the job is requeued elsewhere) for a node without
    its cache; a job without an image, or a crash of the Prolog itself, never drains."""
    req = in_image("switchyard/base:1", "sy-img-6", ["true"], type="agent")
    slurm.sbatch_command(req)
    node.cache.rename(node.cache.with_name("moved"))
    assert node.prolog(slurm.workdir, req.key) == 1
    (pull,) = read_pulls(slurm.workdir, req.key, JOB_ID)
    assert pull["state"] == "failed" and "cannot pull images" in pull["reason"], pull
    assert node.prolog(slurm.workdir, "sy-no-image-1") == 0
    env = {"SLURM_JOB_ID": "not a number", "SLURMD_NODENAME": node.name}
    assert subprocess.run(["sh", node.wrapper("prolog")], env=env).returncode == 0
