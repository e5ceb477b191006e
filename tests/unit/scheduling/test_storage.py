"""Storage areas in real local-backend jobs: each job sees its pool's areas at their paths with
the right modes, its own project's folder and no other, and works in a kept folder of its
own (docs/storage.md). Real processes, real bubblewrap, real Unix accounts and groups:
alice's jobs run as sy-alice, bob's as sy-bob (`make test` creates them)."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

import pytest

from scheduling import engine
from scheduling.engine import get_backend
from scheduling.files.folders import project_group
from scheduling.models import Task
from scheduling.selectors.logs import task_log
from tests.conftest import descriptor, in_ci, submit
from tests.unit.scheduling.local_backend.helpers import finished

if os.geteuid() != 0 and not in_ci():
    pytestmark = pytest.mark.skip("jobs run as other accounts only when the worker is root")


def run(api, root: Path, script: str, **fields) -> tuple[Task, str]:
    """Submit a task with this script through the API, dispatch it, wait: (task, its log)."""
    made = submit(api, descriptor(command=None, script=script, **fields))
    assert made.status_code == 201, made.json()
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted", task.reason
    task.refresh_from_db()
    job = finished(get_backend("local"), task.backend_id, timeout=30)
    return task, f"{job.state} {job.reason}\n" + task_log(task=task)


def test_a_job_mounts_its_pools_areas_with_their_modes_and_works_in_a_kept_folder(api, areas):
    projects, home, datasets = areas / "projects", areas / "home", areas / "datasets"
    task, log = run(
        api,
        areas,
        f"""
echo "pwd=$(pwd)"
echo made > {projects}/materials/by-job && echo PROJECT-WRITABLE
echo made > {home}/alice/by-job && echo HOME-WRITABLE
echo made > {datasets}/by-job 2>/dev/null && echo DATASETS-WRITABLE
test -d {datasets} && echo DATASETS-SEEN
ls {projects}
echo result > result.txt
""",
    )
    assert "PROJECT-WRITABLE" in log and "HOME-WRITABLE" in log, log
    assert "DATASETS-SEEN" in log and "DATASETS-WRITABLE" not in log, log
    workdir = projects / "materials" / "tasks" / str(task.pk)
    assert f"pwd={workdir}" in log
    # Only its own project's folder is in its sandbox: the base lists materials alone.
    assert log.split("DATASETS-SEEN\n", 1)[1].split()[0] == "materials", log
    # Kept after the job ends, its account's, in the project's group.
    group = grp.getgrnam(project_group("materials")).gr_gid
    result = workdir / "result.txt"
    assert result.read_text() == "result\n"
    assert result.stat().st_uid == pwd.getpwnam("sy-alice").pw_uid
    assert result.stat().st_gid == group
    assert stat.S_IMODE(result.stat().st_mode) == 0o660  # the project's to share
    folder = (projects / "materials").stat()
    assert (folder.st_uid, folder.st_gid, stat.S_IMODE(folder.st_mode)) == (0, group, 0o2770)
    assert "sy-alice" in grp.getgrnam(project_group("materials")).gr_mem
    own = (home / "alice").stat()
    assert (own.st_uid, stat.S_IMODE(own.st_mode)) == (pwd.getpwnam("sy-alice").pw_uid, 0o700)


def test_one_projects_job_cannot_read_another_projects_folder(api, outsider_api, areas):
    projects = areas / "projects"
    _, log = run(outsider_api, areas, "echo secret > data.txt", project="genomics")
    secret = next((projects / "genomics" / "tasks").iterdir()) / "data.txt"
    assert secret.read_text() == "secret\n"
    _, log = run(
        api,
        areas,
        f"""
cat {secret} 2>/dev/null && echo READ-OTHER
ls {projects}/genomics 2>/dev/null && echo SAW-OTHER
echo done
""",
    )
    assert "done" in log and "READ-OTHER" not in log and "SAW-OTHER" not in log, log
    # Outside any sandbox too: genomics' folder is its group's alone, and alice is not in it.
    assert "sy-alice" not in grp.getgrnam(project_group("genomics")).gr_mem
    assert stat.S_IMODE((projects / "genomics").stat().st_mode) & 0o007 == 0


def test_a_workdir_outside_the_jobs_folders_is_refused_at_submission(api, areas):
    for workdir in ("/etc", f"{areas}/projects/genomics/run", f"{areas}/datasets/x"):
        refused = submit(api, descriptor(workdir=workdir))
        assert refused.status_code == 400, refused.json()
        [error] = refused.json()["errors"]
        assert error["field"] == "workdir" and error["got"] == workdir
        assert f"{areas}/projects/materials" in error["message"]


def test_a_named_workdir_is_made_by_the_job_and_used(api, areas):
    workdir = f"{areas}/home/alice/runs/first"
    _, log = run(api, areas, 'echo "pwd=$(pwd)"; echo x > out', workdir=workdir)
    assert f"pwd={workdir}" in log, log
    assert Path(workdir, "out").stat().st_uid == pwd.getpwnam("sy-alice").pw_uid
