"""Storage areas on a real Slurm: a job sees its pool's areas in its batch script's sandbox,
at their paths and with their modes, and works in its own kept folder (docs/storage.md). The
localhost cluster shares this machine's folders and accounts, as a site's shared file
system and directory would."""

from __future__ import annotations

import grp
import pwd
import subprocess

import pytest
from django.contrib.auth.models import User

from portal.models import Membership, Project
from scheduling.engine import get_backend
from scheduling.files.folders import project_group
from scheduling.models import Quota
from tests.integration.slurm.conftest import drive, submit_task

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_a_slurm_job_sees_its_pools_areas_and_works_in_its_own_folder(
    api, alice_account, storage_root
):
    root = storage_root
    projects, datasets = root / "projects", root / "datasets"
    script = f"""
echo "pwd=$(pwd)"
echo made > {projects}/materials/by-job && echo PROJECT-WRITABLE
echo made > {root}/home/alice/by-job && echo HOME-WRITABLE
echo made > {datasets}/by-job 2>/dev/null && echo DATASETS-WRITABLE
test -d {datasets} && echo DATASETS-SEEN
echo "listed=$(ls {projects})"
echo result > result.txt
"""
    pk = submit_task(api, name="areas", command=None, script=script)
    [task] = drive([pk], timeout=90)
    log = get_backend("slurm").log(task.backend_id)
    assert task.state == "succeeded", (task.reason, log)
    assert "PROJECT-WRITABLE" in log and "HOME-WRITABLE" in log, log
    assert "DATASETS-SEEN" in log and "DATASETS-WRITABLE" not in log, log
    assert "listed=materials\n" in log, log  # no other project's folder in its sandbox
    workdir = projects / "materials" / "tasks" / str(pk)
    assert f"pwd={workdir}" in log, log
    result = workdir / "result.txt"
    assert result.read_text() == "result\n"
    assert result.stat().st_uid == pwd.getpwnam("sy-alice").pw_uid
    assert result.stat().st_gid == grp.getgrnam(project_group("materials")).gr_gid


def test_a_slurm_job_reads_an_uploaded_input_as_dot_name_and_a_missing_one_fails_it(
    api, alice_account, storage_root
):
    root = storage_root  # alice's folders made as a worker makes them when she opens Files
    files = "/api/v1/files/projects/materials"
    for name in ("train.py", "gone.py"):
        put = api.put(f"{files}/{name}", data=b"print('trained')\n", content_type="text/x")
        assert put.status_code == 201, put.json()
    train, gone = root / "projects/materials/train.py", root / "projects/materials/gone.py"
    ok = submit_task(api, name="given", command=["python3", "train.py"], inputs=[str(train)])
    late = submit_task(api, name="late", command=["true"], inputs=[str(gone)])
    gone.unlink()  # after submission, before it starts
    # A folder on an input's way swapped for a link into another project's folder, where
    # a file of that name is: not followed, and the reason does not tell it is there.
    assert api.post(f"{files}/", data={"mkdir": "code"}, format="json").status_code < 300
    put = api.put(f"{files}/code/x.py", data=b"x\n", content_type="text/x")
    assert put.status_code == 201, put.json()
    code = root / "projects/materials/code"
    swapped = submit_task(api, name="swapped", command=["true"], inputs=[f"{code}/x.py"])
    theirs = root / "projects/genomics/code"
    theirs.mkdir(parents=True)
    (theirs / "x.py").write_text("theirs\n")
    (code / "x.py").unlink()
    code.rmdir()
    code.symlink_to(theirs)
    done, failed, refused = drive([ok, late, swapped], timeout=90)
    assert refused.state == "failed", refused.reason
    assert f"input {code}/x.py is missing or reached through a link" in refused.reason
    assert "genomics" not in refused.reason
    log = get_backend("slurm").log(done.backend_id)
    assert done.state == "succeeded", (done.reason, log)
    assert "trained\n" in log, log
    link = root / "projects/materials/tasks" / str(ok) / "train.py"
    assert link.readlink() == train
    assert link.lstat().st_uid == pwd.getpwnam("sy-alice").pw_uid
    assert failed.state == "failed", failed.reason
    assert f"input {gone} is missing" in failed.reason, failed.reason


def test_a_member_who_just_joined_a_project_has_its_group_in_their_next_job(
    api, alice_account, storage_root
):
    """A node's slurmd keeps an account's groups from a job's start for GroupUpdateTime (600
    s by default): the portal's slurm.conf sets 0, so alice's first job in a project she has
    just joined, right after a job of hers in another, can enter the project's folder."""
    before = submit_task(api, name="before", command=["true"])  # in materials
    [task] = drive([before], timeout=90)
    assert task.state == "succeeded", task.reason
    alice = User.objects.get(username="alice")
    joined = Project.objects.create(slug="newcomers", name="Newcomers", pi=alice)
    Membership.objects.create(project=joined, user=alice, role=Membership.Role.PI)
    for quota in Quota.objects.filter(project__slug="materials", user=None):
        quota.pk, quota.project = None, joined  # the same room to submit as materials has
        quota.save()
    try:
        pk = submit_task(api, name="first", project="newcomers", command=["true"])
        [task] = drive([pk], timeout=90)
        # Its own folder is made by the job inside the project's folder, which only the
        # project's group may enter: without the group, "the working folder … could not be
        # made" (exit 66).
        assert task.state == "succeeded", task.reason
        folder = storage_root / "projects" / "newcomers" / "tasks" / str(pk)
        assert folder.stat().st_uid == pwd.getpwnam("sy-alice").pw_uid
    finally:
        subprocess.run(["groupdel", project_group("newcomers")], check=False, capture_output=True)
