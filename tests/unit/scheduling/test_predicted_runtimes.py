"""Predicted runtimes in the live engine: stored on a task when it is queued from the last runs
of the same work, shown on its page and in the API with its error once it ends, and a
queue's error on the Queues page. The prediction plans; the walltime still ends a job."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from scheduling import engine
from scheduling.backends import JobState
from scheduling.engine import get_backend
from scheduling.models import Attempt, Task
from scheduling.selectors.runtimes import queue_prediction_errors, recent_runtimes
from tests.conftest import descriptor, submit

pytestmark = pytest.mark.django_db

# The runs start a day ago: within the week the Queues page's figure covers.
T0 = timezone.now().replace(microsecond=0) - timedelta(days=1)


def _queued(api, **overrides) -> Task:
    response = submit(api, descriptor(**overrides))
    assert response.status_code == 201, response.json()
    task = Task.objects.get(pk=response.json()["id"])
    assert engine.task_dispatch(task.pk) == "submitted"
    task.refresh_from_db()
    return task


def _run(task: Task, start: datetime, seconds: float, end=JobState.SUCCEEDED) -> Task:
    fake = get_backend("fake")
    fake.finish(task.backend_id, JobState.RUNNING, at=start)
    engine.backend_poll("fake")
    fake.finish(task.backend_id, end, exit_code=0, at=start + timedelta(seconds=seconds))
    engine.backend_poll("fake")
    task.refresh_from_db()
    return task


def _ran(api, seconds: float, *, at: datetime = T0, **overrides) -> Task:
    return _run(_queued(api, **overrides), at, seconds)


def _planned_by_backend(task: Task) -> float | None:
    """The predicted runtime the backend was handed with the task's attempt, to plan by."""
    key = Attempt.objects.get(task=task, number=task.attempts).key
    return get_backend("fake").requests_for("fake")[key].planned_runtime_s


def test_the_first_run_of_some_work_has_no_prediction(api):
    task = _queued(api, walltime="1h")
    assert task.runtime_key and task.predicted_runtime_s is None
    assert _planned_by_backend(task) is None  # the backend plans it by its walltime
    body = api.get(f"/api/v1/tasks/{task.pk}/").json()
    assert body["predicted_runtime_s"] is None
    assert body["prediction"]["text"] == (
        "no predicted runtime: no earlier run of the same work to go by"
    )


def test_it_predicts_from_the_last_two_runs_and_measures_its_error(api, browser):
    _ran(api, 300, walltime="1h")
    _ran(api, 600, at=T0 + timedelta(hours=1), walltime="1h")
    _ran(api, 900, at=T0 + timedelta(hours=2), walltime="1h")
    task = _queued(api, walltime="1h")
    assert task.predicted_runtime_s == 750  # (600 + 900) / 2: the 300 s run is older
    assert _planned_by_backend(task) == 750
    body = api.get(f"/api/v1/tasks/{task.pk}/").json()
    assert body["prediction"]["text"] == "predicted runtime 12min30s"
    assert "predicted runtime 12min30s" in browser.get(f"/tasks/{task.pk}/").content.decode()

    _run(task, T0 + timedelta(hours=3), 840)
    body = api.get(f"/api/v1/tasks/{task.pk}/").json()
    assert body["prediction"] == {
        "predicted_s": 750,
        "ran_s": 840.0,
        "off_s": 90.0,
        "text": "ran 14min, predicted 12min30s: 1min30s under",
    }
    assert "ran 14min, predicted 12min30s: 1min30s under" in (
        browser.get(f"/tasks/{task.pk}/").content.decode()
    )


def test_asking_more_it_scales_by_the_share_of_their_walltimes_the_runs_used(api):
    _ran(api, 1200, walltime="1h")  # a third of what it asked
    _ran(api, 2400, at=T0 + timedelta(hours=1), walltime="1h")  # two thirds
    assert _queued(api, walltime="2h").predicted_runtime_s == 3600  # half of 2 h
    # Asking less: their mean (30 min), capped by the walltime asked now.
    assert _queued(api, walltime="15m").predicted_runtime_s == 900
    assert _queued(api, walltime="45m").predicted_runtime_s == 1800


def test_runs_on_the_queues_default_walltime_give_their_mean(api):
    _ran(api, 1200, walltime=None)  # the queue's default walltime applied
    assert _queued(api, walltime="15m").predicted_runtime_s == 900
    assert _queued(api, walltime="1h").predicted_runtime_s == 1200


def test_other_work_does_not_count(api):
    _ran(api, 600)
    assert _queued(api, command=["sleep", "1"]).predicted_runtime_s is None
    assert _queued(api, project="climate").predicted_runtime_s is None


def test_a_cancelled_or_retried_run_says_nothing_about_the_work(api, settings):
    settings.SWITCHYARD_RETRY_BACKOFF_SECONDS = 0
    cancelled = _queued(api)
    _run(cancelled, T0, 30, end=JobState.CANCELLED)
    assert recent_runtimes([cancelled.runtime_key]) == {cancelled.runtime_key: []}
    retried = _queued(api, retry_count=1)
    _run(retried, T0, 30, end=JobState.FAILED)
    assert retried.state == "pending"  # a second attempt follows: its runs are not one run
    assert engine.task_dispatch(retried.pk) == "submitted"
    retried.refresh_from_db()
    _run(retried, T0 + timedelta(hours=1), 40)
    assert retried.attempts == 2
    assert recent_runtimes([retried.runtime_key]) == {retried.runtime_key: []}


def test_the_prediction_never_ends_a_job(api):
    _ran(api, 60, walltime="1h")
    task = _queued(api, walltime="1h")
    assert task.predicted_runtime_s == 60
    started = timezone.now() - timedelta(minutes=10)
    get_backend("fake").finish(task.backend_id, JobState.RUNNING, at=started)
    engine.backend_poll("fake")  # 10 minutes past its 1 minute prediction, within its walltime
    task.refresh_from_db()
    assert task.state == "running"
    assert get_backend("fake").jobs_for("fake")[task.backend_id].state is JobState.RUNNING


def test_a_queue_shows_how_far_its_predictions_were_off(api, browser):
    _ran(api, 600, walltime="1h")
    late = _ran(api, 900, at=T0 + timedelta(hours=1), walltime="1h")  # predicted 600: 300 under
    early = _ran(api, 600, at=T0 + timedelta(hours=2), walltime="1h")  # predicted 750: 150 over
    assert (late.predicted_runtime_s, early.predicted_runtime_s) == (600, 750)
    error = queue_prediction_errors([late.queue_id], now=T0 + timedelta(hours=3))[late.queue_id]
    assert error.count == 2
    assert error.mean_abs_error_s == 225.0
    assert error.share_under == 0.5
    assert error.mean_abs_relative_error == pytest.approx((300 / 900 + 150 / 600) / 2)
    # Measured a week ago, the figure has forgotten them.
    later = T0 + timedelta(days=8)
    assert queue_prediction_errors([late.queue_id], now=later)[late.queue_id].count == 0
    page = browser.get("/queues/").content.decode()
    assert "off by 3min45s on average over 2 tasks of the last 7 days" in page
    assert "no predicted runtime measured against its run in the last 7 days" in page
