"""One beat sends at a time (portal/beat.py): the file lock on one machine, the Redis lock
across hosts; a beat without the lock stands by and sends nothing."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings

from portal import beat
from tests.conftest import in_ci

LOCAL_REDIS = "redis://127.0.0.1:6379/15"


def test_a_second_file_lock_waits_until_the_first_is_released(tmp_path):
    first, second = beat.FileBeatLock(tmp_path / "b.lock"), beat.FileBeatLock(tmp_path / "b.lock")
    assert first.hold() and first.hold()  # kept
    assert not second.hold()
    first.release()
    assert second.hold()


def _redis_url() -> str | None:
    url = settings.REDIS_URL or LOCAL_REDIS
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except redis.RedisError:
        assert not in_ci(), f"CI must reach Redis at {url}"
        return None
    return url


def test_the_redis_lock_has_one_holder_and_expires_when_its_holder_dies(monkeypatch):
    url = _redis_url()
    if url is None:
        pytest.skip("no Redis on this machine (CI has one)")
    name = f"{beat.LOCK_NAME}:test-{id(object())}"
    monkeypatch.setattr(beat, "LEASE_SECONDS", 1)
    first, second = beat.RedisBeatLock(url, name), beat.RedisBeatLock(url, name)
    assert first.hold() and first.hold()  # extended
    assert not second.hold()
    first.release()
    assert second.hold()
    # A holder that stops extending (killed) loses the lock to a standby within the lease.
    deadline = time.monotonic() + 5
    third = beat.RedisBeatLock(url, name)
    while not third.hold():
        assert time.monotonic() < deadline, "the lock never expired"
        time.sleep(0.1)
    assert not second.hold()


def test_a_standby_beat_sends_nothing(monkeypatch):
    class Held:
        def hold(self):
            return False

        def release(self):
            pass

    scheduler = beat.SingleBeatScheduler.__new__(beat.SingleBeatScheduler)
    scheduler.lock, scheduler.was_holding = Held(), None
    sent = []
    monkeypatch.setattr(beat.PersistentScheduler, "tick", lambda self, *a, **k: sent.append(1) or 1)
    assert scheduler.tick() == beat.STANDBY_SECONDS
    assert sent == []
