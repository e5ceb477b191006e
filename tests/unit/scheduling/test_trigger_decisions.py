"""Where a trigger file may lie, as plain values: the folders a task's jobs mount and the
trigger roots, both as written and as resolved (docs/workflows.md)."""

from __future__ import annotations

import pytest

from scheduling.decisions.storage import AreaView
from scheduling.decisions.triggers import Allowed, trigger_folders, trigger_problem

AREAS = (
    AreaView("scratch", "/scratch/{project}", "project", pools=("hpc", "gpu")),
    AreaView("home", "/home/{user}", "user", pools=("hpc",)),
    AreaView("datasets", "/datasets", "site", read_only=True, pools=("hpc",)),
)
FOLDERS = ("/scratch/materials", "/home/alice", "/datasets")
ALLOWED = Allowed(folders=FOLDERS, roots=("/srv/triggers",), resolved=(*FOLDERS, "/srv/triggers"))


def test_a_task_may_wait_in_every_folder_its_jobs_mount_read_only_ones_too():
    assert trigger_folders(AREAS, pool="hpc", project="materials", user="alice") == [
        "/datasets",
        "/home/alice",
        "/scratch/materials",
    ]
    # Another pool mounts less; a user name that cannot be a folder's has none.
    assert trigger_folders(AREAS, pool="gpu", project="materials", user="alice") == [
        "/scratch/materials"
    ]
    assert trigger_folders(AREAS, pool="hpc", project="materials", user="Bob@x") == [
        "/datasets",
        "/scratch/materials",
    ]


@pytest.mark.parametrize(
    "path",
    [
        "/scratch/materials/flows/run-1/READY",
        "/home/alice/READY",
        "/datasets/2024/DONE",
        "/srv/triggers/READY",
    ],
)
def test_it_takes_a_file_inside_an_allowed_folder(path):
    assert trigger_problem(path, path, ALLOWED) is None


@pytest.mark.parametrize(
    "path",
    [
        "/scratch/genomics/READY",  # another project's folder
        "/scratch/READY",  # the area's base
        "/home/bob/READY",
        "/etc/passwd",
        "/scratch/materialsX/READY",  # a prefix is not a folder
    ],
)
def test_it_refuses_a_file_outside_every_allowed_folder_naming_them(path):
    problem = trigger_problem(path, path, ALLOWED)
    assert problem == (
        "must lie inside a folder the task's jobs mount (/scratch/materials, /home/alice, "
        "/datasets) or a trigger root (/srv/triggers)"
    )


@pytest.mark.parametrize(
    "path",
    [
        "/scratch/materials/../genomics/READY",
        "/scratch/materials/x/../READY",
        "/scratch/materials/./READY",
        "/scratch//materials/READY",
        "//scratch/materials/READY",
    ],
)
def test_it_refuses_dot_components_even_when_they_would_lead_back_in(path):
    assert "plain absolute path" in trigger_problem(path, path, ALLOWED)


def test_it_refuses_a_path_whose_links_resolve_outside_without_saying_where():
    problem = trigger_problem("/scratch/materials/out/READY", "/scratch/genomics/READY", ALLOWED)
    assert problem is not None and problem.startswith("leads outside")
    assert "genomics" not in problem


def test_a_link_between_allowed_folders_is_followed():
    assert trigger_problem("/scratch/materials/flag", "/home/alice/flag", ALLOWED) is None


def test_the_resolved_folders_count_when_an_area_lives_behind_a_link():
    # /scratch is a link to /lustre/scratch on this host: the job mounts the resolved folder.
    allowed = Allowed(folders=("/scratch/materials",), resolved=("/lustre/scratch/materials",))
    assert trigger_problem("/scratch/materials/R", "/lustre/scratch/materials/R", allowed) is None
    assert trigger_problem("/scratch/materials/R", "/scratch/materials/R", allowed) is not None


def test_with_no_folder_and_no_root_nothing_is_allowed():
    problem = trigger_problem("/x/READY", "/x/READY", Allowed(folders=()))
    assert problem == "must lie inside an allowed folder (its queue's pool mounts no storage area)"
