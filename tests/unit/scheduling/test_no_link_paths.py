"""A job's working folder and inputs are reached from its mounted folders without following
a symbolic link, before its sandbox starts (docs/storage.md): a folder on an input's way
swapped for a link into another project's folder between submission and start fails the
job with a reason that says nothing of what is there. The Slurm batch script's lines run
here in bash as they would on a node; the local backend runs real jobs (real bubblewrap)."""

from __future__ import annotations

import os
import pwd
import subprocess
from pathlib import Path

import pytest

from scheduling import engine
from scheduling.backends.base import Job, JobState, SubmitRequest
from scheduling.backends.slurm.jobfolder import with_input_reason
from scheduling.backends.storage import (
    INPUT_EXIT,
    INPUT_REASON,
    UNCHECKED,
    is_prelude_reason,
    missing_input,
    script_lines,
    taken_link,
    workdir_refused,
    workdir_taken,
)
from scheduling.decisions.storage import JobStorage, Mount
from scheduling.decisions.types import QueuePolicy
from scheduling.descriptor import parse_task
from scheduling.engine import get_backend
from scheduling.models import Task
from scheduling.selectors.logs import task_log
from tests.conftest import descriptor, in_ci, submit
from tests.unit.scheduling.local_backend.helpers import finished
from tests.unit.scheduling.test_inputs import upload

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and not in_ci(), reason="jobs run as other accounts only as root"
)


def slurm_prelude(tmp_path: Path, inputs: list[str], workdir: str) -> tuple[int, str, str]:
    """Run the batch script's lines before the sandbox: (exit status, stderr, reason file)."""
    request = SubmitRequest(
        key="k1",
        spec=parse_task(descriptor(inputs=inputs)),
        type="sandbox",
        queue=QueuePolicy(name="cpu", pool="cpu", task_types=()),
        project="materials",
        user="alice",
        storage=JobStorage(
            mounts=(Mount(str(tmp_path / "p" / "materials"), False, "project"),),
            workdir=workdir,
        ),
    )
    job = tmp_path / "jobs" / "k1"
    job.mkdir(parents=True, exist_ok=True)
    (job / INPUT_REASON).unlink(missing_ok=True)
    script = "\n".join(["set -u", *script_lines(request, str(job)), "echo STARTED"])
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    reason = job / INPUT_REASON
    return done.returncode, done.stdout + done.stderr, reason.read_text() if reason.exists() else ""


@pytest.fixture
def two_projects(tmp_path: Path) -> Path:
    for project in ("materials", "genomics"):
        (tmp_path / "p" / project / "code").mkdir(parents=True)
    (tmp_path / "p" / "genomics" / "code" / "secret.py").write_text("theirs\n")
    (tmp_path / "p" / "materials" / "code" / "train.py").write_text("ours\n")
    return tmp_path


def test_the_slurm_script_links_an_input_reached_without_links(two_projects):
    base = two_projects / "p" / "materials"
    status, out, _ = slurm_prelude(two_projects, [f"{base}/code/train.py"], f"{base}/flows/run-1")
    assert status == 0 and "STARTED" in out, out
    assert os.readlink(base / "flows" / "run-1" / "train.py") == f"{base}/code/train.py"


def test_the_slurm_script_refuses_an_input_whose_folder_was_swapped_for_a_link(two_projects):
    base = two_projects / "p" / "materials"
    (base / "code" / "train.py").unlink()
    (base / "code").rmdir()
    os.symlink(two_projects / "p" / "genomics" / "code", base / "code")  # the swap
    path = f"{base}/code/secret.py"
    status, out, reason = slurm_prelude(two_projects, [path], f"{base}/tasks/7")
    assert status == INPUT_EXIT and "STARTED" not in out, out
    assert reason.startswith(f"input {path} is missing or reached through a link"), reason
    assert "genomics" not in reason
    # The same reason as for an input that is not there at all: nothing is learnt.
    (base / "code").unlink()
    _, _, absent = slurm_prelude(two_projects, [path], f"{base}/tasks/8")
    assert absent == reason


def test_the_slurm_script_makes_no_folder_through_a_link(two_projects):
    base = two_projects / "p" / "materials"
    os.symlink(two_projects / "p" / "genomics", base / "flows")
    status, out, reason = slurm_prelude(two_projects, [], f"{base}/flows/run-1")
    assert status == INPUT_EXIT and "STARTED" not in out, out
    assert "is a symbolic link (links are not followed)" in reason, reason
    assert not (two_projects / "p" / "genomics" / "run-1").exists()


@needs_root
def test_a_local_job_whose_inputs_folder_was_swapped_for_a_link_fails_without_telling(api, areas):
    projects = areas / "projects"
    upload(api, "projects/materials/code/train.py", b"ours\n")
    (projects / "genomics" / "code").mkdir()
    (projects / "genomics" / "code" / "train.py").write_text("theirs\n")
    path = projects / "materials" / "code" / "train.py"
    made = submit(api, descriptor(inputs=[str(path)]))
    assert made.status_code == 201, made.json()
    # Between submission and start, the folder on its way becomes a link to genomics'.
    (projects / "materials" / "code" / "train.py").unlink()
    (projects / "materials" / "code").rmdir()
    os.symlink(projects / "genomics" / "code", projects / "materials" / "code")
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted", task.reason
    task.refresh_from_db()
    job = finished(get_backend("local"), task.backend_id, timeout=30)
    assert job.state is JobState.FAILED, job
    assert job.reason.startswith(f"input {path} is missing or reached through a link"), job
    assert "genomics" not in job.reason
    own = projects / "materials" / "tasks" / str(task.pk)
    assert not (own / "train.py").is_symlink()


@needs_root
def test_a_local_jobs_workdir_is_not_made_through_a_link(api, areas):
    projects = areas / "projects"
    made = submit(api, descriptor(workdir="flows/run-1"))
    assert made.status_code == 201, made.json()
    os.symlink(projects / "genomics", projects / "materials" / "flows")
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted", task.reason
    task.refresh_from_db()
    job = finished(get_backend("local"), task.backend_id, timeout=30)
    assert job.state is JobState.FAILED, job
    assert "links are not followed" in job.reason, job.reason
    assert not (projects / "genomics" / "run-1").exists()


# --- the task's own folder, tasks/<id>, made fresh by its job ---------------------------------


@pytest.mark.parametrize("workdir", ["tasks/99", "tasks", "{base}/tasks/99/sub"])
def test_a_workdir_inside_tasks_is_refused_at_submission(api, areas, workdir):
    base = f"{areas}/projects/materials"
    refused = submit(api, descriptor(workdir=workdir.format(base=base)))
    assert refused.status_code == 400, refused.json()
    [error] = refused.json()["errors"]
    assert error["field"] == "workdir" and error["got"].startswith(f"{base}/tasks"), error
    assert error["message"] == (
        f"must not be inside {base}/tasks, which holds tasks' own folders"
    ), error
    assert Task.objects.count() == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="a folder of another account is made by root")
def test_the_slurm_script_refuses_a_tasks_folder_someone_else_made_first(two_projects):
    base = two_projects / "p" / "materials"
    planted = base / "tasks" / "7"
    planted.mkdir(parents=True)
    (planted / "train.py").write_text("import os; os.system('steal')\n")
    os.chown(planted, 54321, 54321)  # a co-member's account
    status, out, reason = slurm_prelude(two_projects, [], str(planted))
    assert status == INPUT_EXIT and "STARTED" not in out, out
    assert reason.startswith(f"the task's own folder {planted} was there before"), reason
    # The task shows that reason, not "exit code 66".
    failed = Job("5:k1", JobState.FAILED, reason="exit code 66", exit_code=INPUT_EXIT)
    assert with_input_reason(two_projects / "jobs", failed).reason == reason
    # A later attempt of the same task finds the folder its own account made: reused.
    os.chown(planted, os.geteuid(), os.getegid())
    status, out, _ = slurm_prelude(two_projects, [], str(planted))
    assert status == 0 and "STARTED" in out, out


@needs_root
def test_code_planted_in_the_next_tasks_folder_is_never_run(api, areas):
    made = submit(api, descriptor(command=["sh", "-c", "test -e train.py && echo RAN-PLANTED"]))
    assert made.status_code == 201, made.json()
    task = Task.objects.get(pk=made.json()["id"])
    # A co-member makes the folder the task will work in before it starts.
    planted = areas / "projects" / "materials" / "tasks" / str(task.pk)
    planted.mkdir(parents=True)
    (planted / "train.py").write_text("print('planted')\n")
    bob = pwd.getpwnam("sy-bob")
    group = planted.parent.parent.stat().st_gid  # the project's, as the member's umask leaves
    for folder in (planted.parent, planted):
        os.chown(folder, bob.pw_uid, group)
        folder.chmod(0o2770)
    assert engine.task_dispatch(task.pk) == "submitted", task.reason
    task.refresh_from_db()
    job = finished(get_backend("local"), task.backend_id, timeout=30)
    assert job.state is JobState.FAILED, job
    assert job.reason.startswith(f"the task's own folder {planted} was there before"), job
    log = task_log(task=task)
    assert "RAN-PLANTED" not in log, log
    assert (planted / "train.py").read_text() == "print('planted')\n"  # left alone


def test_a_reason_file_of_another_form_is_not_shown(tmp_path):
    """The job's account writes the reason file: a text of no form the lines before its
    sandbox write stays unshown."""
    (tmp_path / "k1").mkdir()
    (tmp_path / "k1" / INPUT_REASON).write_text("your account is suspended: pay at evil.example")
    failed = Job("5:k1", JobState.FAILED, reason="exit code 66", exit_code=INPUT_EXIT)
    assert with_input_reason(tmp_path, failed).reason == "exit code 66"


def test_every_reason_the_prelude_writes_is_one_a_slurm_task_shows():
    """The forms `is_prelude_reason` accepts are the messages' own beginnings: a message
    reworded without it would fall back to "exit code 66" on Slurm."""
    path = "/p/materials/run/x.py"
    for reason in (
        missing_input(path),
        taken_link(path, "/p/materials/run/x.py"),
        workdir_refused("/p/materials/run"),
        workdir_taken("/p/materials/tasks/7"),
        UNCHECKED,
    ):
        assert is_prelude_reason(reason), reason
