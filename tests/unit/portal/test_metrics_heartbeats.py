"""The beat's and the worker's heartbeats, Celery task failures and the warm sandbox pools as
metrics (config/metrics/instruments.py); what the alert rules watch."""

from __future__ import annotations

import time
from types import SimpleNamespace

from celery import signals
from prometheus_client import REGISTRY

from config.celery import app
from config.metrics.files import all_role_dirs, fresh_role_dir, role_env
from config.runtime import beat


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def _scheduler(holding: bool) -> beat.SingleBeatScheduler:
    class Lock:
        def hold(self):
            return holding

        def release(self):
            pass

    scheduler = beat.SingleBeatScheduler.__new__(beat.SingleBeatScheduler)
    scheduler.lock, scheduler.was_holding = Lock(), None
    return scheduler


def test_the_beat_that_sends_beats_and_a_standby_does_not(monkeypatch):
    monkeypatch.setattr(beat.PersistentScheduler, "tick", lambda self, *a, **k: 1.0)
    beat.instruments.BEAT_HEARTBEAT.set(0)
    _scheduler(holding=False).tick()
    assert value("switchyard_beat_last_tick_timestamp_seconds") == 0
    before = time.time()
    _scheduler(holding=True).tick()
    assert value("switchyard_beat_last_tick_timestamp_seconds") >= before


class _Task:
    """What Celery's signals send as `sender`: a task, with its request."""

    def __init__(self, name: str, *, eager: bool) -> None:
        self.name, self.request = name, SimpleNamespace(is_eager=eager)


def test_a_worker_beats_when_it_finishes_a_task_run_by_a_worker_not_eagerly():
    beat.instruments.WORKER_HEARTBEAT.set(0)
    eager = _Task("scheduling.poll_backends", eager=True)
    signals.task_postrun.send(sender=eager, task_id="t1", task=eager, args=(), kwargs={})
    assert value("switchyard_worker_last_task_timestamp_seconds") == 0
    before = time.time()
    worked = _Task("scheduling.poll_backends", eager=False)
    signals.task_postrun.send(sender=worked, task_id="t2", task=worked, args=(), kwargs={})
    assert value("switchyard_worker_last_task_timestamp_seconds") >= before


def test_a_task_that_raises_is_counted_by_name():
    task = app.tasks["scheduling.poll_backends"]
    before = value("switchyard_celery_task_failures_total", task="scheduling.poll_backends")
    signals.task_failure.send(sender=task, task_id="t3", exception=RuntimeError("boom"))
    after = value("switchyard_celery_task_failures_total", task="scheduling.poll_backends")
    assert after == before + 1


def test_a_role_starts_with_an_empty_folder_of_its_own(tmp_path, settings):
    folder = fresh_role_dir(tmp_path, "web")
    (folder / "counter_123.db").write_bytes(b"left by a process that died")
    again = role_env(tmp_path, "web", enabled=True)
    assert again == {"PROMETHEUS_MULTIPROC_DIR": str(folder)}
    assert list(folder.iterdir()) == []
    assert role_env(tmp_path, "worker", enabled=False) == {}
    assert all_role_dirs(tmp_path) == [folder]
