"""The submit form's working folder: a plain field, filled from a picker of the user's folders
that jobs may work in; what is picked is where the job starts."""

from __future__ import annotations

import os

from django.test import Client

from scheduling.models import Task
from tests.unit.scheduling.test_storage import run

PICKER = "/tasks/new/folders/"


def test_the_submit_form_has_the_field_and_a_picker_that_works_without_javascript(
    browser: Client, areas
):
    page = browser.get("/tasks/new/").content.decode()
    assert 'name="workdir"' in page and 'id="id_workdir"' in page
    # Without htmx the picker's slot is a link to Files, where each folder's path is shown.
    assert 'id="workdir-picker"' in page and 'hx-get="/tasks/new/folders/"' in page
    assert 'href="/files/"' in page


def test_the_picker_lists_the_folders_jobs_may_work_in_and_fills_the_field(
    browser: Client, api, areas
):
    root = browser.get(PICKER)
    assert root.status_code == 200
    paths = {line.split('"')[0] for line in root.content.decode().split('data-path="')[1:]}
    # The user's project folders and own folder; not a read-only site area, not another's.
    assert paths == {"projects/materials", "projects/climate", "home/alice"}
    assert b"use-workdir" not in root.content  # nothing to use at the top

    assert api.post("/api/v1/files/projects/materials/", {"mkdir": "run1"}, format="json")
    inside = browser.get(PICKER, {"at": "projects/materials"})
    assert inside.status_code == 200
    assert b'data-path="projects/materials/run1"' in inside.content
    assert b'id="use-workdir"' in inside.content

    used = browser.get(PICKER, {"use": "projects/materials/run1"})
    assert used.status_code == 200
    host = areas / "projects" / "materials" / "run1"
    html = used.content.decode()
    assert html.strip().startswith("<input") and 'id="id_workdir"' in html
    assert f'value="{host}"' in html


def test_the_picker_opens_nothing_that_is_not_a_folder_the_users_jobs_may_work_in(
    browser: Client, areas
):
    (areas / "projects" / "genomics").mkdir(parents=True, exist_ok=True)
    own = areas / "projects" / "materials"
    os.symlink("../genomics", own / "next-door")
    (own / "notes.txt").write_text("a file\n")
    for path in ("projects/genomics", "home/bob", "datasets", "nosuch", "projects"):
        for key in ("at", "use"):
            answer = browser.get(PICKER, {key: path})
            assert answer.status_code == 404, (key, path, answer.status_code)
    for path in (
        "projects/materials/../genomics",
        "projects/materials/next-door",  # a link, even to a folder
        "projects/materials/notes.txt",  # a file
        "projects/materials/x\0y",
        "projects/materials//etc",
    ):
        used = browser.get(PICKER, {"use": path})
        assert 400 <= used.status_code < 500, (path, used.status_code)
        assert b"<input" not in used.content
        listed = browser.get(PICKER, {"at": path})
        assert b"data-path" not in listed.content, path


def test_a_job_submitted_from_the_form_with_a_picked_folder_works_there(
    browser: Client, api, areas
):
    run1 = areas / "projects" / "materials" / "run1"
    assert api.post("/api/v1/files/projects/materials/", {"mkdir": "run1"}, format="json")
    fields = {
        "name": "in-run1",
        "project": "materials",
        "command": "sh -c 'pwd > where.txt'",
        "walltime": "5m",
        "cpus": "1",
        "gpus": "0",
        "memory": "1Gi",
    }
    outside = browser.post("/tasks/new/", {**fields, "workdir": "/etc"})
    assert outside.status_code == 400
    assert b'id="error-workdir"' in outside.content
    sent = browser.post("/tasks/new/", {**fields, "workdir": str(run1)})
    assert sent.status_code == 302, sent.content.decode()[-2000:]
    task = Task.objects.get(name="in-run1")
    assert task.spec["workdir"] == str(run1)
    # The same descriptor through the API runs, and the job starts in the picked folder.
    ran, log = run(api, areas, "pwd > where.txt", workdir=str(run1))
    assert (run1 / "where.txt").read_text().strip() == str(run1), log


def test_the_task_pages_working_directory_link_opens_it_for_members_only(
    browser: Client, outsider_browser: Client, api, areas
):
    task, _ = run(api, areas, "echo out > out.txt")
    detail = browser.get(f"/tasks/{task.pk}/")
    link = f"/files/projects/materials/tasks/{task.pk}"
    assert f'href="{link}" id="task-workdir"'.encode() in detail.content
    opened = browser.get(link)
    assert opened.status_code == 200 and b"out.txt" in opened.content
    # bob is not in materials: neither the task nor its folder exists for him.
    assert outsider_browser.get(f"/tasks/{task.pk}/").status_code == 404
    assert outsider_browser.get(link).status_code == 404
    assert outsider_browser.get(f"{link}/out.txt").status_code == 404
