"""A researcher's data round trip in real Chromium: upload train.py through Files, submit the
AI-training template to run it in that folder (picked from Files), the job runs on the local
backend (bubblewrap, as the job account), then open its working directory from the task page
and download what it wrote."""

from __future__ import annotations

import pwd
import re
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# What the researcher uploads: the template runs `python3 train.py --epochs 10`.
TRAIN_PY = """\
import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, required=True)
epochs = parser.parse_args().epochs
loss = 1.0
for epoch in range(1, epochs + 1):
    loss /= 2
    print(f"epoch {epoch}/{epochs} loss {loss:.6f}", flush=True)
with open("model.txt", "w") as out:
    out.write(f"trained for {epochs} epochs, final loss {loss:.6f}\\n")
print("saved model.txt")
"""


def test_upload_train_py_submit_the_template_open_the_workdir_download_the_model(
    site, storage_root, worker, page, tmp_path
):
    run1 = storage_root / "projects" / "materials" / "run1"
    page.goto("/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-demo-pass")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()

    # Files: into the project's folder, make run1/, upload train.py there.
    page.get_by_role("link", name="Files", exact=True).click()
    page.get_by_role("link", name="projects/materials", exact=True).click()
    page.locator("#mkdir #id_name").fill("run1")
    page.locator("#mkdir button").click()
    page.locator("#entries").get_by_role("link", name="run1/").click()
    source = tmp_path / "train.py"
    source.write_text(TRAIN_PY)
    page.locator("#id_file").set_input_files(str(source))
    page.locator("#upload button").click()
    expect(page.locator("#entries")).to_contain_text("train.py")
    assert (run1 / "train.py").read_text() == TRAIN_PY

    # Submit: the AI-training template, run in run1/, picked from Files.
    page.get_by_role("link", name="Submit", exact=True).click()
    page.locator("#template-ai-training").click()
    # (The template may also make a small train.py where there is none: ours is there.)
    expect(page.get_by_label("Command")).to_have_value(re.compile(r"python3 train\.py"))
    page.get_by_label("Project").select_option("materials")
    more = page.locator("details.more")
    if more.get_attribute("open") is None:  # open already when the template sets an estimate
        more.locator("> summary").click()
    page.get_by_text("Pick the working folder or inputs from your files").click()
    page.locator("#workdir-picker").get_by_role("link", name="projects/materials/").click()
    page.locator("#workdir-picker").get_by_role("link", name="run1/").click()
    expect(page.locator("#workdir-picker .crumbs")).to_contain_text("run1")
    page.locator("#use-workdir").click()
    expect(page.locator("#id_workdir")).to_have_value(str(run1))
    page.locator("#submit").click()

    expect(page).to_have_url(re.compile(r"/tasks/\d+/$"))
    expect(page.locator("#task-state")).to_have_text("succeeded", timeout=90_000)
    expect(page.locator("#task-log")).to_contain_text("epoch 10/10")
    expect(page.locator("#task-log")).to_contain_text("saved model.txt")

    # Its working directory, from the task page: run1/, with the model beside train.py.
    page.locator("#task-workdir").click()
    expect(page).to_have_url(re.compile(r"/files/projects/materials/run1/?$"))
    entries = page.locator("#entries")
    expect(entries).to_contain_text("model.txt")
    with page.expect_download() as download:
        entries.get_by_role("link", name="model.txt", exact=True).click()
    got = Path(download.value.path()).read_text()
    assert got == "trained for 10 epochs, final loss 0.000977\n"
    assert got == (run1 / "model.txt").read_text()
    # Both were written as the job account, never as root: the upload and the job's output.
    account = pwd.getpwnam(settings.SWITCHYARD_JOB_ACCOUNT).pw_uid
    assert (run1 / "train.py").stat().st_uid == account != 0
    assert (run1 / "model.txt").stat().st_uid == account


def test_train_py_added_as_an_input_runs_in_the_tasks_own_folder(
    site, storage_root, worker, page, tmp_path
):
    code = storage_root / "projects" / "materials" / "code"
    page.goto("/login/")
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("alice-demo-pass")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Tasks")).to_be_visible()

    page.goto("/files/projects/materials")
    page.locator("#mkdir #id_name").fill("code")
    page.locator("#mkdir button").click()
    page.locator("#entries").get_by_role("link", name="code/").click()
    source = tmp_path / "train.py"
    source.write_text(TRAIN_PY)
    page.locator("#id_file").set_input_files(str(source))
    page.locator("#upload button").click()
    expect(page.locator("#entries")).to_contain_text("train.py")

    # Submit: the template, train.py added as an input from the picker; no working folder.
    page.get_by_role("link", name="Submit", exact=True).click()
    page.locator("#template-ai-training").click()
    page.get_by_label("Project").select_option("materials")
    more = page.locator("details.more")
    if more.get_attribute("open") is None:
        more.locator("> summary").click()
    page.get_by_text("Pick the working folder or inputs from your files").click()
    page.locator("#workdir-picker").get_by_role("link", name="projects/materials/").click()
    page.locator("#workdir-picker").get_by_role("link", name="code/").click()
    page.locator('[data-input="projects/materials/code/train.py"]').click()
    expect(page.locator("#id_inputs")).to_have_value(str(code / "train.py"))
    expect(page.locator("#id_workdir")).to_have_value("")
    page.locator("#submit").click()

    expect(page).to_have_url(re.compile(r"/tasks/\d+/$"))
    expect(page.locator("#task-state")).to_have_text("succeeded", timeout=90_000)
    expect(page.locator("#task-log")).to_contain_text("saved model.txt")
    task_id = re.search(r"/tasks/(\d+)/", page.url).group(1)  # type: ignore[union-attr]
    own = storage_root / "projects" / "materials" / "tasks" / task_id
    assert (own / "train.py").readlink() == code / "train.py"
    assert (own / "model.txt").read_text() == "trained for 10 epochs, final loss 0.000977\n"
