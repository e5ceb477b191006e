"""What the Slurm backend reports of a job's image pull, from the nodes' pull files
(scheduling/backends/slurm/imagejob.py; docs/containers.md, "Slurm notes")."""

from __future__ import annotations

import json
import os
import pwd

import pytest

from scheduling.backends.base import Job, JobState
from scheduling.backends.slurm.imagejob import (
    IMAGE_EXIT,
    image_path,
    pull_path,
    read_pulls,
    with_pull,
)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="pull files are root's")


@pytest.fixture
def workdir(tmp_path):
    (tmp_path / "sy-1-1.image.json").write_text("{}")
    return tmp_path


def write(workdir, node: str, **data) -> None:
    pull_path(workdir, "sy-1-1", node).write_text(json.dumps(data))


def test_while_the_prolog_runs_the_job_shows_the_slowest_nodes_progress(workdir):
    write(workdir, "n1", job_id="7", state="pulling", done=30_000_000, total=40_000_000, seconds=3)
    write(workdir, "n2", job_id="7", state="pulling", done=10_000_000, total=40_000_000, seconds=4)
    job = with_pull(workdir, Job("7:sy-1-1", JobState.RUNNING), in_prolog=True)
    assert job.reason == "pulling image 25% (10/40 MB)"
    assert job.pull is not None and job.pull.done_bytes == 10_000_000
    assert job.pull.total_bytes == 40_000_000 and job.pull.seconds == 4 and not job.pull.finished
    # Before any file: still pulling, progress unknown.
    for path in workdir.glob("*.pull.*"):
        path.unlink()
    job = with_pull(workdir, Job("7:sy-1-1", JobState.RUNNING), in_prolog=True)
    assert job.reason == "pulling image" and job.pull is None


def test_a_failed_pull_is_the_jobs_reason(workdir):
    reason = "pulling image 127.0.0.1:9/x:1 failed: registry 127.0.0.1:9 unreachable"
    write(workdir, "n1", job_id="7", state="failed", reason=reason, seconds=1.5)
    ended = Job("7:sy-1-1", JobState.FAILED, "exit code 67", exit_code=IMAGE_EXIT)
    job = with_pull(workdir, ended, in_prolog=False)
    assert job.reason == reason and job.pull is not None and job.pull.finished


def test_files_of_another_job_or_not_roots_are_ignored(workdir):
    write(workdir, "n1", job_id="8", state="failed", reason="forged")
    write(workdir, "n2", job_id="7", state="failed", reason="forged too")
    account = pwd.getpwnam("switchyard-job")
    os.chown(pull_path(workdir, "sy-1-1", "n2"), account.pw_uid, account.pw_gid)
    assert read_pulls(workdir, "sy-1-1", "7") == []
    ended = Job("7:sy-1-1", JobState.FAILED, "exit code 67", exit_code=IMAGE_EXIT)
    job = with_pull(workdir, ended, in_prolog=False)
    assert "forged" not in job.reason and "did not pull" in job.reason


def test_a_job_without_an_image_is_left_as_it_is(workdir):
    image_path(workdir, "sy-1-1").unlink()
    running = Job("7:sy-1-1", JobState.RUNNING, "")
    assert with_pull(workdir, running, in_prolog=True) is running
