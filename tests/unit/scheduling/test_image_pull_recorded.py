"""What a job says of its image's pull reaches its task and attempt (docs/containers.md): the
task shows "pulling image N%" while it pulls; the attempt keeps the pull's seconds and bytes
once it is done, shown in the task API and on the task page."""

from __future__ import annotations

import dataclasses

import pytest

from scheduling import engine
from scheduling.backends import ImagePull, JobState
from scheduling.backends.fake import FakeBackend
from scheduling.models import Task
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db


def _queued(api) -> Task:
    response = submit(api, descriptor())
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    engine.task_dispatch(task.pk)
    task.refresh_from_db()
    assert task.state == "queued"
    return task


def test_a_pull_shows_its_progress_then_its_time_and_bytes_are_kept_on_the_attempt(api, browser):
    task = _queued(api)
    job = FakeBackend.jobs_for("fake")[task.backend_id]
    pulling = dataclasses.replace(
        job,
        reason="pulling image 43% (12/28 MB)",
        pull=ImagePull(12_000_000, 28_000_000, 2.5, finished=False),
    )
    assert engine.apply_job(task, pulling)
    task.refresh_from_db()
    assert task.reason == "pulling image 43% (12/28 MB)"
    attempt = task.attempt_set.get()
    assert (attempt.pull_seconds, attempt.pull_bytes) == (None, None)  # not done yet
    api_task = api.get(f"/api/v1/tasks/{task.pk}/").json()
    assert api_task["reason"] == "pulling image 43% (12/28 MB)"
    assert api_task["attempt_list"][0]["pull_seconds"] is None

    done = dataclasses.replace(
        job,
        state=JobState.RUNNING,
        reason="image pulled in 6.2s (28.0 MB), not counted in its walltime",
        pull=ImagePull(28_000_000, 28_000_000, 6.2, finished=True),
    )
    assert engine.apply_job(task, done)
    attempt.refresh_from_db()
    assert (attempt.pull_seconds, attempt.pull_bytes) == (6.2, 28_000_000)
    listed = api.get(f"/api/v1/tasks/{task.pk}/").json()["attempt_list"][0]
    assert (listed["pull_seconds"], listed["pull_bytes"]) == (6.2, 28_000_000)
    page = browser.get(f"/tasks/{task.pk}/").content.decode()
    assert "Image pull" in page and "6.2 s, 26.7\xa0MB" in page, page

    # Written once: a later report (the job's end) does not change it.
    ended = dataclasses.replace(done, state=JobState.SUCCEEDED, exit_code=0, reason="")
    ended = dataclasses.replace(ended, pull=ImagePull(1, 1, 99.0, finished=True))
    engine.apply_job(task, ended)
    attempt.refresh_from_db()
    assert (attempt.pull_seconds, attempt.pull_bytes) == (6.2, 28_000_000)


def test_a_cached_image_is_recorded_as_no_pull(api, browser):
    task = _queued(api)
    job = FakeBackend.jobs_for("fake")[task.backend_id]
    cached = ImagePull(0, 1_000_000, 0.0, finished=True)
    engine.apply_job(task, dataclasses.replace(job, state=JobState.RUNNING, pull=cached))
    attempt = task.attempt_set.get()
    assert (attempt.pull_seconds, attempt.pull_bytes) == (0.0, 0)
    assert ">cached<" in browser.get(f"/tasks/{task.pk}/").content.decode()


def test_a_job_without_an_image_records_no_pull(api):
    task = _queued(api)
    job = FakeBackend.jobs_for("fake")[task.backend_id]
    engine.apply_job(task, dataclasses.replace(job, state=JobState.RUNNING))
    attempt = task.attempt_set.get()
    assert (attempt.pull_seconds, attempt.pull_bytes) == (None, None)
