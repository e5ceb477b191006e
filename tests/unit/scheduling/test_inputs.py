"""The descriptor's `inputs`: files and folders of the job's storage folders, linked into its
working folder under their own names before its command starts (docs/storage.md). Parsing,
the refusals at submission, and real local-backend jobs (real bubblewrap, real accounts)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from scheduling import engine
from scheduling.backends.base import JobState, SubmitRequest
from scheduling.backends.local.nolinks import prepare
from scheduling.backends.storage import INPUT_EXIT, script_lines
from scheduling.decisions.storage import AreaView, JobStorage, input_problem
from scheduling.decisions.types import QueuePolicy
from scheduling.descriptor import DescriptorError, parse_task, parse_workflow
from scheduling.engine import get_backend
from scheduling.models import Task
from scheduling.spec import TaskSpec
from tests.conftest import descriptor, in_ci, submit
from tests.unit.scheduling.local_backend.helpers import finished
from tests.unit.scheduling.test_storage import run

API = "/api/v1/files"
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 and not in_ci(), reason="jobs run as other accounts only as root"
)


def errors_of(inputs) -> list[tuple[str | None, str, object]]:
    try:
        parse_task(descriptor(inputs=inputs))
    except DescriptorError as exc:
        return [(e.field, e.message, e.got) for e in exc.errors]
    return []


def test_inputs_are_kept_in_order_and_survive_the_spec_round_trip():
    spec = parse_task(descriptor(inputs=["/scratch/p/train.py", "/datasets/cifar"]))
    assert spec.inputs == ("/scratch/p/train.py", "/datasets/cifar")
    assert TaskSpec.from_dict(spec.as_dict()) == spec
    assert spec.as_dict()["inputs"] == ["/scratch/p/train.py", "/datasets/cifar"]
    assert parse_task(descriptor()).inputs == ()
    # Stored before inputs existed: none.
    stored = spec.as_dict()
    del stored["inputs"]
    assert TaskSpec.from_dict(stored).inputs == ()


@pytest.mark.parametrize(
    "path, message",
    [
        ("train.py", "must be an absolute path"),
        ("/a/../b", "must not contain .. components"),
        ("/a//b", "must be a normalised path"),
        ("//a", "must be a normalised path"),
        ("/a/./b", "must be a normalised path"),
        ("/a/b/", "must be a normalised path"),
        ("/", "must be a normalised path"),
        ("/a\x00b", "must be an absolute path"),
        ("/a\nb", "must be an absolute path"),
        (3, "must be an absolute path"),
    ],
)
def test_a_path_that_is_not_absolute_and_normalised_is_refused(path, message):
    [(field, got_message, got)] = errors_of(["/ok/first", path])
    assert field == "inputs[1]" and got == path
    assert got_message.startswith(message), got_message


def test_two_inputs_of_one_name_are_refused_naming_both():
    [(field, message, got)] = errors_of(["/a/train.py", "/b/data", "/c/train.py"])
    assert (field, got) == ("inputs[2]", "/c/train.py")
    assert "inputs[0]" in message and "./train.py" in message


def test_inputs_must_be_a_list_of_at_most_64():
    assert errors_of("/a/b") == [
        ("inputs", "must be a list of absolute paths of files or folders", "/a/b")
    ]
    assert errors_of([f"/a/{i}" for i in range(64)]) == []
    [(field, message, got)] = errors_of([f"/a/{i}" for i in range(65)])
    assert (field, got) == ("inputs", 65) and "at most 64" in message


def test_a_workflow_step_takes_inputs_too():
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "w",
        "project": "materials",
        "tasks": [
            {"name": "a", "command": ["true"], "inputs": ["/x/y"]},
            {"name": "b", "command": ["true"], "inputs": ["/x/../y"]},
        ],
    }
    with pytest.raises(DescriptorError) as refused:
        parse_workflow(doc)
    assert [e.field for e in refused.value.errors] == ["tasks[1].inputs[0]"]
    doc["tasks"][1]["inputs"] = ["/x/z"]
    assert [t.inputs for t in parse_workflow(doc).tasks] == [("/x/y",), ("/x/z",)]


def test_an_input_may_be_in_any_folder_the_job_mounts_read_only_ones_too():
    areas = [
        AreaView("projects", "/p/{project}", "project", pools=("cpu",)),
        AreaView("datasets", "/datasets", "site", read_only=True, pools=("cpu",)),
        AreaView("home", "/home/{user}", "user", pools=("gpu",)),
    ]
    ask = {"pool": "cpu", "project": "materials", "user": "alice"}
    assert input_problem(areas, "/p/materials/train.py", **ask) is None
    assert input_problem(areas, "/datasets/cifar", **ask) is None
    for path in ("/p/genomics/x", "/home/alice/x", "/p/materials/../genomics/x", "/etc/passwd"):
        problem = input_problem(areas, path, **ask)
        assert problem == "must be inside a folder the job mounts (/datasets, /p/materials)"


def test_the_slurm_script_links_each_input_and_fails_naming_it():
    spec = parse_task(descriptor(inputs=["/p/materials/train.py"]))
    request = SubmitRequest(
        key="k1",
        spec=spec,
        type="sandbox",
        queue=QueuePolicy(name="cpu", pool="cpu", task_types=()),
        project="materials",
        user="alice",
        storage=JobStorage(workdir="/p/materials/tasks/7"),
    )
    text = "\n".join(script_lines(request, "/jobs/k1"))
    assert "python3 -I -S -c" in text and '"/p/materials/train.py"' in text
    assert f"> /jobs/k1/input-reason; exit {INPUT_EXIT}" in text


# --- at submission, and in real jobs --------------------------------------------------------


def upload(api, path: str, data: bytes) -> None:
    parent, _, name = path.rpartition("/")[0].rpartition("/")
    api.post(f"{API}/{parent}/", data={"mkdir": name}, format="json")  # 409 when it is there
    put = api.put(f"{API}/{path}", data=data, content_type="application/octet-stream")
    assert put.status_code == 201, put.json()


@needs_root
def test_an_uploaded_file_given_as_an_input_is_read_by_the_job_as_dot_name(api, browser, areas):
    upload(api, "projects/materials/code/train.py", b"print('trained')\n")
    upload(api, "projects/materials/data/set1.csv", b"1,2\n")
    train = f"{areas}/projects/materials/code/train.py"
    data = f"{areas}/projects/materials/data"
    task, log = run(
        api,
        areas,
        'cat ./train.py; ls ./data; echo "link=$(readlink train.py)"; python3 train.py',
        inputs=[train, data],
    )
    assert task.spec["inputs"] == [train, data]
    assert "print('trained')" in log and "set1.csv" in log and "trained\n" in log, log
    assert f"link={train}" in log, log
    link = areas / "projects" / "materials" / "tasks" / str(task.pk) / "train.py"
    assert os.readlink(link) == train
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="task-inputs"' in page and f"<code>{train}</code>" in page
    # Made by the job's own account, never by root.
    assert link.lstat().st_uid == pwd.getpwnam("sy-alice").pw_uid


@needs_root
def test_an_input_missing_at_start_fails_the_job_naming_it(api, areas):
    upload(api, "projects/materials/code/gone.py", b"x\n")
    path = areas / "projects" / "materials" / "code" / "gone.py"
    made = submit(api, descriptor(inputs=[str(path)]))
    assert made.status_code == 201, made.json()
    path.unlink()  # between submission and start
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted", task.reason
    task.refresh_from_db()
    job = finished(get_backend("local"), task.backend_id, timeout=30)
    assert job.state is JobState.FAILED, job
    assert job.reason.startswith(f"input {path} is missing"), job.reason


@needs_root
def test_a_file_of_the_inputs_name_in_the_workdir_is_left_alone_and_fails_the_job(api, areas):
    upload(api, "projects/materials/code/train.py", b"new\n")
    workdir = areas / "home" / "alice" / "run"
    upload(api, "home/alice/run/train.py", b"mine\n")
    train = f"{areas}/projects/materials/code/train.py"
    _, log = run(api, areas, "echo RAN", inputs=[train], workdir=str(workdir))
    assert "RAN" not in log, log
    assert f"input {train} cannot be linked as {workdir}/train.py" in log, log
    assert (workdir / "train.py").read_text() == "mine\n"


@needs_root
def test_inputs_the_job_cannot_have_are_refused_at_submission(api, areas):
    upload(api, "projects/materials/code/train.py", b"x\n")
    base = f"{areas}/projects/materials"
    os.symlink("/etc/passwd", f"{base}/code/out")
    os.symlink(f"{base}/code", f"{base}/via")
    cases = {
        "/etc/passwd": "must be inside a folder the job mounts",
        f"{areas}/projects/genomics/x": "must be inside a folder the job mounts",
        f"{base}/code/none.py": "no such file or folder",
        f"{base}/code/out": "it is a symbolic link",
        f"{base}/via/train.py": "symbolic link",
    }
    for path, message in cases.items():
        refused = submit(api, descriptor(inputs=[f"{base}/code", path]))
        assert refused.status_code == 400, (path, refused.json())
        [error] = refused.json()["errors"]
        assert error["field"] == "inputs[1]", error
        assert path.startswith(error["got"].removesuffix("...")), error  # long ones cut short
        assert message in error["message"], error
    # A site area mounted read-only is a place to read inputs from.
    Path(areas, "datasets", "cifar").mkdir()
    ok = submit(api, descriptor(inputs=[f"{areas}/datasets/cifar"]))
    assert ok.status_code == 201, ok.json()


# --- the submit form ------------------------------------------------------------------------
PICKER = "/tasks/new/folders/"
FIELDS = {
    "name": "given",
    "project": "materials",
    "command": "python3 train.py",
    "walltime": "5m",
    "cpus": "1",
    "gpus": "0",
    "memory": "1Gi",
}


@needs_root
def test_the_picker_adds_a_file_or_folder_to_the_inputs_box(browser, api, areas):
    upload(api, "projects/materials/code/train.py", b"x\n")
    os.symlink("/etc/passwd", areas / "projects/materials/code/link")
    page = browser.get("/tasks/new/").content.decode()
    assert 'name="inputs"' in page and 'id="id_inputs"' in page and "<textarea" in page
    listed = browser.get(PICKER, {"at": "projects/materials/code"}).content.decode()
    assert 'data-file="projects/materials/code/train.py"' in listed
    assert 'data-input="projects/materials/code/train.py"' in listed
    assert "code/link" not in listed  # a link is not offered
    host = f"{areas}/projects/materials/code/train.py"
    added = browser.post(PICKER, {"input": "projects/materials/code/train.py", "inputs": "/a\n"})
    assert added.status_code == 200
    html = added.content.decode()
    assert html.strip().startswith("<textarea") and 'id="id_inputs"' in html
    assert f"/a\n{host}</textarea>" in html
    # Added once, however often it is picked; a folder may be added too.
    again = browser.post(PICKER, {"input": "projects/materials/code", "inputs": f"{host}\n"})
    assert f"{host}\n{areas}/projects/materials/code</textarea>" in again.content.decode()
    same = browser.post(PICKER, {"input": "projects/materials/code/train.py", "inputs": host})
    assert same.content.decode().count(host) == 1
    for path in ("projects/materials/code/link", "projects/materials/code/none", "home/bob/x"):
        refused = browser.post(PICKER, {"input": path, "inputs": ""})
        assert 400 <= refused.status_code < 500, (path, refused.status_code)
        assert b"<textarea" not in refused.content


@needs_root
def test_inputs_from_the_form_reach_the_spec_and_a_bad_line_is_named(browser, api, areas):
    upload(api, "projects/materials/code/train.py", b"x\n")
    host = f"{areas}/projects/materials/code/train.py"
    bad = browser.post("/tasks/new/", {**FIELDS, "inputs": f"{host}\r\n/etc/passwd\r\n"})
    assert bad.status_code == 400
    page = bad.content.decode()
    assert 'id="error-inputs"' in page and "inputs[1]: must be inside a folder" in page
    sent = browser.post("/tasks/new/", {**FIELDS, "inputs": f"  {host}\r\n\r\n"})
    assert sent.status_code == 302, sent.content.decode()[-2000:]
    assert Task.objects.get(name="given").spec["inputs"] == [host]


@needs_root
def test_a_workflow_steps_input_is_checked_at_submission_naming_the_step(api, areas):
    upload(api, "projects/materials/code/train.py", b"x\n")
    steps = [
        {"name": "a", "command": ["true"], "inputs": [f"{areas}/projects/materials/code"]},
        {"name": "b", "command": ["true"], "inputs": [f"{areas}/projects/genomics/x"]},
    ]
    doc = {
        "apiVersion": "switchyard/v1",
        "kind": "Workflow",
        "name": "w",
        "project": "materials",
        "tasks": steps,
    }
    refused = api.post("/api/v1/workflows/", doc, format="json")
    assert refused.status_code == 400, refused.json()
    [error] = refused.json()["errors"]
    assert error["field"] == "tasks[1].inputs[0]", error
    steps[1]["inputs"] = [f"{areas}/projects/materials/code/train.py"]
    made = api.post("/api/v1/workflows/", doc, format="json")
    assert made.status_code == 201, made.json()


def test_the_supervisor_reuses_its_own_link_and_leaves_anything_else_alone(tmp_path):
    given = tmp_path / "code" / "train.py"
    given.parent.mkdir()
    given.write_text("x\n")
    work = tmp_path / "work"
    work.mkdir()
    link = work / "train.py"
    plan = {
        "workdir": str(work),
        "workdir_base": str(tmp_path),
        "workdir_refused": "REFUSED",
        "workdir_taken": "OWN TAKEN",
        "inputs": [[str(given), str(tmp_path), "train.py", "MISSING", "TAKEN"]],
    }
    assert prepare(plan) == ""
    assert os.readlink(link) == str(given)
    assert prepare(plan) == ""  # a later attempt in the kept folder
    link.unlink()
    link.write_text("mine\n")
    assert prepare(plan) == "TAKEN" and link.read_text() == "mine\n"
    link.unlink()
    link.mkdir()  # a folder of that name is not linked into either
    assert prepare(plan) == "TAKEN" and not any(link.iterdir())
    given.unlink()
    assert prepare(plan) == "MISSING"
