"""`switchyard files` against a live portal's Files API: ls, put, get, mkdir, rm, and what
it refuses (another project's folder, a path that leaves its folder, a link)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.test_cli import cli  # noqa: F401 - the fixture

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def logged_in(storage_root, cli):  # noqa: F811 - the fixture imported above
    login = cli("login", "-u", "alice", "--password-stdin", stdin="alice-demo-pass\n")
    assert login.returncode == 0, login.stderr
    return cli


def test_put_ls_get_mkdir_rm_round_trip(logged_in, storage_root, tmp_path):
    run = logged_in
    folders = run("-o", "json", "files", "ls")
    assert folders.returncode == 0, folders.stderr
    paths = {f["path"] for f in json.loads(folders.stdout)}
    assert {"projects/materials", "home/alice", "datasets"} <= paths
    assert "projects/genomics" not in paths  # alice is not a member

    made = run("files", "mkdir", "projects/materials/run1")
    assert made.returncode == 0, made.stderr
    source = tmp_path / "train.py"
    source.write_bytes(b"print('training')\n" + bytes(range(256)) * 4096)  # 1 MiB and a bit
    put = run("files", "put", str(source), "projects/materials/run1/")
    assert put.returncode == 0, put.stderr
    stored = storage_root / "projects" / "materials" / "run1" / "train.py"
    assert stored.read_bytes() == source.read_bytes()

    listed = run("-o", "json", "files", "ls", "projects/materials/run1")
    assert listed.returncode == 0, listed.stderr
    [entry] = json.loads(listed.stdout)
    assert entry["name"] == "train.py" and entry["size"] == source.stat().st_size
    text = run("files", "ls", "projects/materials")
    assert "run1/" in text.stdout

    got = run("files", "get", "projects/materials/run1/train.py", str(tmp_path / "back.py"))
    assert got.returncode == 0, got.stderr
    assert (tmp_path / "back.py").read_bytes() == source.read_bytes()
    again = run("files", "get", "projects/materials/run1/train.py", str(tmp_path / "back.py"))
    assert again.returncode == 2 and "--force" in again.stderr  # never overwritten unasked
    (tmp_path / "notes.txt").write_text("epochs: 10\n")
    assert (
        run("files", "put", str(tmp_path / "notes.txt"), "projects/materials/n.txt").returncode == 0
    )
    piped = run("files", "get", "projects/materials/n.txt", "-")
    assert piped.returncode == 0 and piped.stdout == "epochs: 10\n"
    assert run("files", "rm", "projects/materials/n.txt").returncode == 0
    folder = run("files", "get", "projects/materials/run1")
    assert folder.returncode == 2 and "is a folder" in folder.stderr

    full = run("files", "rm", "projects/materials/run1")
    assert full.returncode == 5, full.stderr  # not empty: a conflict
    assert run("files", "rm", "projects/materials/run1/train.py").returncode == 0
    assert run("files", "rm", "projects/materials/run1").returncode == 0
    assert not (storage_root / "projects" / "materials" / "run1").exists()


def test_what_is_not_yours_or_leaves_its_folder_is_refused(logged_in, storage_root, tmp_path):
    run = logged_in
    genomics = storage_root / "projects" / "genomics"
    genomics.mkdir(parents=True, exist_ok=True)
    (genomics / "secret").write_text("not alice's\n")
    own = storage_root / "projects" / "materials"
    os.symlink("/etc", own / "out")
    os.symlink("../genomics", own / "next-door")
    source = tmp_path / "x"
    source.write_text("ESCAPED\n")

    for path in ("projects/genomics/secret", "home/bob/x", "nosuch/x"):
        for args in (("get", path, "-"), ("put", str(source), path), ("rm", path)):
            done = run("files", *args)
            assert done.returncode == 4, (args, done.returncode, done.stderr)  # not found
    for path in (
        "projects/materials/../genomics/secret",
        "projects/materials/%2e%2e/genomics/secret",
        "projects/materials/out/passwd",
        "projects/materials/next-door/secret",
        "projects/materials/sub/../../genomics/secret",
    ):
        for args in (("get", path, "-"), ("put", str(source), path)):
            done = run("files", *args)
            assert done.returncode in (2, 4), (args, done.returncode, done.stderr)
            assert "ESCAPED" not in done.stdout and "not alice's" not in done.stdout
    assert (genomics / "secret").read_text() == "not alice's\n"
    assert b"ESCAPED" not in Path("/etc/passwd").read_bytes()
    # A link is listed as one, and removing it removes the link, not what it points to.
    listed = json.loads(run("-o", "json", "files", "ls", "projects/materials").stdout)
    assert {e["name"]: e["type"] for e in listed}["next-door"] == "link"
    assert run("files", "rm", "projects/materials/next-door").returncode == 0
    assert (genomics / "secret").exists()
