"""Storage areas as plain values: their patterns, what a job mounts, where it works."""

from __future__ import annotations

import pytest

from scheduling.decisions.storage import (
    AreaView,
    Mount,
    default_workdir,
    job_mounts,
    job_storage,
    overlap_problem,
    pattern_problem,
    within,
    workdir_problem,
)

AREAS = (
    AreaView("scratch", "/scratch/{project}", "project", pools=("hpc", "gpu")),
    AreaView("home", "/home/{user}", "user", pools=("hpc",)),
    AreaView("datasets", "/datasets", "site", read_only=True, pools=("hpc", "gpu")),
    AreaView("archive", "/archive/{project}", "project", read_only=True, pools=("hpc",)),
)


@pytest.mark.parametrize(
    ("path", "owner"),
    [
        ("/scratch/{project}", "project"),
        ("/home/{user}", "user"),
        ("/datasets", "site"),
        ("/lustre/a.b_c-d/{user}", "user"),
        ("/var/lib/switchyard/{project}", "project"),
    ],
)
def test_it_takes_the_patterns_of_each_owner(path, owner):
    assert pattern_problem(path, owner) is None


@pytest.mark.parametrize(
    ("path", "owner", "says"),
    [
        ("scratch/{project}", "project", "absolute"),
        ("/scratch/../etc/{project}", "project", "absolute"),
        ("/scratch/{project}/data", "project", "absolute"),
        ("/scratch/{user}", "project", "{project}"),
        ("/datasets/{project}", "site", "one folder"),
        ("/home", "user", "{user}"),
        ("/scratch/{project}", "nobody", "owner"),
        ("/scratch/x y", "site", "absolute"),
        ("/{project}", "project", "not in /"),
        ("/{user}", "user", "not in /"),
        ("/var/{project}", "project", "not in /var"),
        ("/etc", "site", "not in /etc"),
        ("/etc/ssl/{user}", "user", "not in /etc/ssl"),
        ("/proc/{project}", "project", "system folder"),
        ("/tmp/scratch/{project}", "project", "system folder"),
        ("/usr/local/{user}", "user", "system folder"),
    ],
)
def test_it_refuses_a_pattern_that_names_no_folder_of_its_owner(path, owner, says):
    assert says in pattern_problem(path, owner)


def test_a_job_mounts_its_own_folders_of_its_pools_areas_and_never_a_base():
    mounts = job_mounts(AREAS, pool="hpc", project="materials", user="alice")
    assert mounts == [
        Mount("/archive/materials", True, "project"),
        Mount("/datasets", True, "site"),
        Mount("/home/alice", False, "user"),
        Mount("/scratch/materials", False, "project"),
    ]
    assert [m.path for m in job_mounts(AREAS, pool="gpu", project="g", user="u")] == [
        "/datasets",
        "/scratch/g",
    ]
    assert job_mounts(AREAS, pool="sandbox", project="g", user="u") == []


def test_a_task_works_in_its_own_folder_of_its_first_writable_project_area():
    assert default_workdir(AREAS, pool="hpc", project="materials", task_id=42) == (
        "/scratch/materials/tasks/42"
    )
    assert default_workdir(AREAS, pool="sandbox", project="materials", task_id=42) == ""
    storage = job_storage(
        AREAS, pool="hpc", project="materials", user="alice", task_id=7, workdir=None
    )
    assert storage.workdir == "/scratch/materials/tasks/7"
    named = job_storage(AREAS, pool="hpc", project="m", user="a", task_id=7, workdir="/home/a/run")
    assert named.workdir == "/home/a/run"


@pytest.mark.parametrize(
    "workdir",
    ["/scratch/materials", "/scratch/materials/run/1", "/home/alice/x"],
)
def test_a_workdir_inside_a_writable_folder_of_the_job_is_taken(workdir):
    assert workdir_problem(AREAS, workdir, pool="hpc", project="materials", user="alice") is None


@pytest.mark.parametrize(
    "workdir",
    [
        "/scratch/genomics/run",  # another project's folder
        "/scratch",  # the base
        "/home/bob",  # another user's
        "/datasets/x",  # read-only
        "/archive/materials",  # read-only project area
        "/etc",
        "/scratch/materials/../genomics",
        "/scratch/materialsX",
        "relative/path",
    ],
)
def test_a_workdir_outside_the_jobs_writable_folders_is_refused(workdir):
    problem = workdir_problem(AREAS, workdir, pool="hpc", project="materials", user="alice")
    assert problem is not None and "/scratch/materials" in problem


def test_within_needs_a_normalised_absolute_path():
    assert within("/a/b", ["/a"]) and within("/a", ["/a"])
    assert not within("/a/../b", ["/a"]) and not within("/ab", ["/a"])
    assert not within("/a/b\0", ["/a"]) and not within("a/b", ["a"])


def test_an_owner_name_that_cannot_be_a_folder_is_refused():
    with pytest.raises(ValueError):
        AREAS[0].folder("../etc")
    with pytest.raises(ValueError):
        AREAS[1].folder("Alice Smith")


OTHERS = [("scratch", "/scratch/{project}", "project"), ("datasets", "/data/sets", "site")]


@pytest.mark.parametrize(
    ("path", "owner", "other"),
    [
        ("/scratch/{user}", "user", "scratch"),  # a user named like a project gets its folder
        ("/scratch", "site", "scratch"),
        ("/scratch/shared/{user}", "user", "scratch"),  # inside a project's folders' base
        ("/{project}", "project", "datasets"),  # around every other (the first named)
        ("/data/{user}", "user", "datasets"),  # around a site area's folder
        ("/data/sets/{project}", "project", "datasets"),
    ],
)
def test_it_refuses_an_area_whose_folders_meet_anothers(path, owner, other):
    problem = overlap_problem(path, owner, OTHERS)
    assert problem is not None and f"area {other} " in problem


def test_it_takes_areas_with_folders_of_their_own():
    for path, owner in [("/home/{user}", "user"), ("/scratch2/{project}", "project")]:
        assert overlap_problem(path, owner, OTHERS) is None
    assert overlap_problem("/data/other", "site", OTHERS) is None
