"""Files, the API and the page: upload, a real job reads it and writes a result, download;
access by membership only; no path escapes its folder; files are the job account's."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path

import pytest
from django.test import Client

from scheduling.files.fileops import TEMP_PREFIX
from scheduling.files.folders import project_group
from tests.unit.scheduling.test_storage import run

API = "/api/v1/files"


def body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_upload_a_job_reads_it_writes_a_result_and_the_user_downloads_it(api, areas):
    put = api.put(
        f"{API}/projects/materials/inputs/data.txt",
        data=b"41\n",
        content_type="application/octet-stream",
    )
    assert put.status_code == 404  # no folder inputs/ yet
    made = api.post(f"{API}/projects/materials/", data={"mkdir": "inputs"}, format="json")
    assert made.status_code == 201, made.json()
    put = api.put(
        f"{API}/projects/materials/inputs/data.txt",
        data=b"41\n",
        content_type="application/octet-stream",
    )
    assert put.status_code == 201, put.json()
    uploaded = areas / "projects" / "materials" / "inputs" / "data.txt"
    # Written as alice's job account, in the project's group: never as root.
    assert uploaded.stat().st_uid == pwd.getpwnam("sy-alice").pw_uid
    assert uploaded.stat().st_gid == grp.getgrnam(project_group("materials")).gr_gid
    task, log = run(
        api,
        areas,
        f"echo $(( $(cat {uploaded}) + 1 )) > answer.txt; echo ran",
    )
    assert "ran" in log, log
    listing = api.get(f"{API}/projects/materials/tasks/{task.pk}/")
    assert listing.status_code == 200
    assert [e["name"] for e in listing.json()["entries"]] == ["answer.txt"]
    [entry] = listing.json()["entries"]
    assert entry["type"] == "file" and entry["size"] == 3 and entry["mtime"] > 0
    got = api.get(f"{API}/projects/materials/tasks/{task.pk}/answer.txt")
    assert got.status_code == 200 and body(got) == b"42\n"
    assert api.delete(f"{API}/projects/materials/inputs/data.txt").status_code == 204
    assert api.delete(f"{API}/projects/materials/inputs").status_code == 204
    assert not (areas / "projects" / "materials" / "inputs").exists()


def test_the_root_lists_only_the_users_own_folders(api, areas):
    folders = {f["path"] for f in api.get(f"{API}/").json()["folders"]}
    assert folders == {"projects/materials", "projects/climate", "home/alice", "datasets"}


@pytest.mark.parametrize(
    "path",
    [
        "projects/genomics/",  # another project's folder
        "projects/genomics/tasks",
        "home/bob/",  # another user's home
        "nosuch/x",  # no such area
        "projects//etc/passwd",  # an absolute path where the owner goes
        "projects/%2e%2e/genomics",
    ],
)
def test_a_folder_outside_the_users_memberships_is_a_404(api, areas, path):
    (areas / "projects" / "genomics").mkdir(parents=True, exist_ok=True)
    for method in ("get", "put", "delete"):
        assert getattr(api, method)(f"{API}/{path}").status_code == 404, (method, path)


@pytest.mark.parametrize(
    "path",
    [
        "projects/materials/%2e%2e/genomics/x",  # ..
        "projects/materials/a/%2e%2e/%2e%2e/genomics",
        "projects/materials/./x",
        "projects/materials/a//b",
        "projects/materials/x%00y",  # NUL
        "datasets//etc/passwd",  # absolute inside a site area
        "projects/materials/out/passwd",  # through a link to a folder outside
        "projects/materials/out",  # the link itself, opened as a folder
        "projects/materials/shadow",  # a link to a file outside
        "projects/materials/inside",  # a link pointing in: not followed either
    ],
)
def test_no_path_escapes_its_folder(api, areas, path):
    own = areas / "projects" / "materials"
    for name, target in (("out", "/etc"), ("shadow", "/etc/passwd"), ("inside", ".")):
        if not os.path.lexists(own / name):
            os.symlink(target, own / name)
    is_link = path.rsplit("/", 1)[1] in ("out", "shadow", "inside")
    for method in ("get", "put") if is_link else ("get", "put", "delete"):  # a link is removable
        sent = {"data": b"ESCAPED", "content_type": "text/plain"} if method == "put" else {}
        answer = getattr(api, method)(f"{API}/{path}", **sent)
        assert 400 <= answer.status_code < 500, (method, path, answer.status_code)
        assert set(answer.json()) == {"errors"}
    assert b"ESCAPED" not in Path("/etc/passwd").read_bytes()  # nothing was written outside
    # The links are there as links, and /etc as it was.
    listed = api.get(f"{API}/projects/materials/").json()["entries"]
    assert {e["name"]: e["type"] for e in listed}["out"] == "link"
    assert Path("/etc/passwd").exists() and Path("/etc").is_dir()


def test_an_upload_over_the_limit_is_refused_and_leaves_nothing(api, areas, settings):
    settings.SWITCHYARD_FILES_UPLOAD_MAX_BYTES = 10
    big = api.put(f"{API}/home/alice/big", data=b"x" * 11, content_type="application/octet-stream")
    assert big.status_code == 413
    assert os.listdir(areas / "home" / "alice") == []
    ok = api.put(f"{API}/home/alice/small", data=b"x" * 10, content_type="application/octet-stream")
    assert ok.status_code == 201
    assert not [n for n in os.listdir(areas / "home" / "alice") if n.startswith(TEMP_PREFIX)]


def test_a_site_area_is_read_only_in_files(api, areas):
    assert stat.S_IMODE((areas / "datasets").stat().st_mode) == 0o755
    (areas / "datasets" / "ref.txt").write_text("reference\n")
    (areas / "datasets" / "ref.txt").chmod(0o644)  # as the site's admins would leave it
    assert body(api.get(f"{API}/datasets/ref.txt")) == b"reference\n"
    assert api.put(f"{API}/datasets/new", data=b"x", content_type="text/plain").status_code == 403
    assert api.delete(f"{API}/datasets/ref.txt").status_code == 403


def test_the_files_page_browses_uploads_shows_text_and_links_the_tasks_workdir(
    browser: Client, api, areas
):
    assert browser.get("/files/").status_code == 200
    page = browser.get("/files/projects/materials/")
    assert page.status_code == 200 and b'id="upload"' in page.content
    with open(Path(areas) / "note.txt", "w") as f:
        f.write("hello from the page\n")
    with open(Path(areas) / "note.txt", "rb") as f:
        sent = browser.post("/files/projects/materials/", {"action": "upload", "file": f})
    assert sent.status_code == 302
    text = browser.get("/files/projects/materials/note.txt?view=text")
    assert b"hello from the page" in text.content
    assert body(browser.get("/files/projects/materials/note.txt")) == b"hello from the page\n"
    browser.post("/files/projects/materials/", {"action": "mkdir", "name": "sub"})
    assert (areas / "projects" / "materials" / "sub").is_dir()
    browser.post("/files/projects/materials/", {"action": "delete", "name": "sub"})
    assert not (areas / "projects" / "materials" / "sub").exists()
    assert browser.get("/files/projects/genomics/").status_code == 404
    assert browser.get("/files/projects/materials/%2e%2e/genomics/").status_code == 400
    task, _ = run(api, areas, "true")
    detail = browser.get(f"/tasks/{task.pk}/")
    assert f'href="/files/projects/materials/tasks/{task.pk}"'.encode() in detail.content


@pytest.mark.parametrize(
    "path",
    [
        "projects/materials/../genomics/secret",  # .. as sent, not encoded
        "projects/materials/sub/../../genomics/secret",
        "projects/materials/%2E%2E/genomics/secret",  # upper-case escapes
        "projects/materials/sub%2f..%2f..%2fgenomics%2fsecret",  # an encoded slash
        "projects/materials//etc/passwd",  # absolute after the owner
        "projects/materials/%2fetc%2fpasswd",
        "projects/materials/x%00",  # a NUL at the end
        "projects/materials/inside/secret",  # through a link that points in
        "projects/materials/next-door/secret",  # through a link to another project's folder
        "projects/materials/" + "x" * 256,  # a name longer than a file system allows
    ],
)
def test_more_ways_out_are_refused_and_none_reads_or_writes_outside(api, areas, path):
    genomics = areas / "projects" / "genomics"
    genomics.mkdir(parents=True, exist_ok=True)
    (genomics / "secret").write_text("genomics only\n")
    own = areas / "projects" / "materials"
    (own / "sub").mkdir(exist_ok=True)
    for name, target in (("inside", "."), ("next-door", "../genomics")):
        if not os.path.lexists(own / name):
            os.symlink(target, own / name)
    for method in ("get", "put", "delete"):
        sent = {"data": b"ESCAPED", "content_type": "text/plain"} if method == "put" else {}
        answer = getattr(api, method)(f"{API}/{path}", **sent)
        assert 400 <= answer.status_code < 500, (method, path, answer.status_code)
        assert b"genomics only" not in body(answer)
    assert (genomics / "secret").read_text() == "genomics only\n"
    assert not [p for p in areas.rglob("*") if p.is_file() and p.read_bytes() == b"ESCAPED"]


@pytest.mark.parametrize("name", ["..", ".", "/etc", "a/b", "x\0y", "", "y" * 256])
def test_a_folder_name_that_leaves_its_folder_is_refused_by_the_api_and_the_page(
    api, browser: Client, areas, name
):
    before = sorted(p.name for p in (areas / "projects").rglob("*"))
    made = api.post(f"{API}/projects/materials/", data={"mkdir": name}, format="json")
    assert made.status_code == 400, (name, made.status_code)
    page = browser.post("/files/projects/materials/", {"action": "mkdir", "name": name})
    assert page.status_code in (302, 400), (name, page.status_code)
    removed = browser.post("/files/projects/materials/", {"action": "delete", "name": name})
    assert removed.status_code in (302, 400), (name, removed.status_code)
    assert sorted(p.name for p in (areas / "projects").rglob("*")) == before
    assert (areas / "projects" / "materials").is_dir()


def test_the_page_of_a_link_goes_back_to_its_folder_saying_what_it_is(browser: Client, areas):
    own = areas / "projects" / "materials"
    own.mkdir(parents=True, exist_ok=True)
    if not os.path.lexists(own / "elsewhere"):
        os.symlink("/etc", own / "elsewhere")
    page = browser.get("/files/projects/materials/elsewhere/", follow=True)
    html = page.content.decode()
    assert page.redirect_chain[0][0].rstrip("/") == "/files/projects/materials"
    assert "elsewhere is a link: Files opens only files and folders" in html
    assert "passwd" not in html
