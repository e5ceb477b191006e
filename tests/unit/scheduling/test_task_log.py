"""A task's log is read from the file its backend writes the job's output to, recorded on the
attempt at submission: the page and the API read that file and never call the backend."""

from __future__ import annotations

import os

import pytest

from scheduling import engine
from scheduling.backends.local.backend import LocalBackend
from scheduling.engine import get_backend
from scheduling.models import Attempt, Pool, Task
from scheduling.selectors import site_view_invalidate
from tests.conftest import descriptor, submit
from tests.unit.scheduling.local_backend.helpers import finished

pytestmark = pytest.mark.django_db


def _local_task(api, command: list[str]) -> Task:
    Pool.objects.update(backend="local")
    site_view_invalidate()
    made = submit(api, descriptor(command=command))
    assert made.status_code == 201, made.json()
    task = Task.objects.get(pk=made.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    finished(get_backend("local"), task.backend_id, timeout=30)
    return task


def test_the_api_pages_the_log_from_the_file_the_backend_wrote(api, monkeypatch):
    task = _local_task(api, ["printf", "hello\\nworld\\n"])
    attempt = Attempt.objects.get(task=task)
    assert attempt.log_path and os.path.exists(attempt.log_path)

    def no_backend(*args, **kwargs):
        raise AssertionError("a request called the backend")

    monkeypatch.setattr(LocalBackend, "log", no_backend)
    first = api.get(f"/api/v1/tasks/{task.pk}/log/", {"limit": 6}).json()
    assert (first["log"], first["next_offset"]) == ("hello\n", 6)
    rest = api.get(f"/api/v1/tasks/{task.pk}/log/", {"offset": first["next_offset"]}).json()
    assert (rest["log"], rest["next_offset"]) == ("world\n", 12)


def test_the_log_stays_readable_once_housekeeping_removed_the_jobs_folder(api, settings):
    task = _local_task(api, ["echo", "kept"])
    backend = get_backend("local")
    backend.retention_s = 0
    assert engine.housekeep() >= 1
    assert not os.path.exists(backend.store.jobdir(task.backend_id))
    assert api.get(f"/api/v1/tasks/{task.pk}/log/").json()["log"] == "kept\n"


def test_an_unreadable_log_answers_503(api):
    task = _local_task(api, ["echo", "x"])
    attempt = Attempt.objects.get(task=task)
    attempt.log_path = os.path.dirname(attempt.log_path)  # a folder: it cannot be read
    attempt.save(update_fields=["log_path"])
    response = api.get(f"/api/v1/tasks/{task.pk}/log/")
    assert response.status_code == 503
    assert response.json()["errors"][0]["message"].startswith("the log could not be read")


def test_the_page_shows_a_long_logs_end_and_says_what_it_left_out(api, client, researcher):
    """A failure's reason is usually at the end of its output: past the page's 256 KiB the
    page shows the end, and says where the rest is."""
    task = _local_task(api, ["python3", "-c", "[print(f'line {i}') for i in range(60000)]"])
    client.force_login(researcher)
    page = client.get(f"/tasks/{task.pk}/").content.decode()
    shown = page.split('id="task-log">', 1)[1].split("</pre>", 1)[0]
    assert shown.rstrip().endswith("line 59999")
    assert "line 0\n" not in shown
    assert 'id="log-skipped"' in page and f"switchyard logs {task.pk}" in page
    short = _local_task(api, ["echo", "short"])
    assert 'id="log-skipped"' not in client.get(f"/tasks/{short.pk}/").content.decode()
