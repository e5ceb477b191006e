"""One beat sends at a time (config/runtime/beat.py): the file lock on one machine, the Redis lock
across hosts; a beat without the lock stands by and sends nothing."""

from __future__ import annotations

import os
import time

import pytest
import redis
from django.conf import settings

from config.runtime import beat
from tests.conftest import in_ci
from tests.servers import RedisServer

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


def test_a_beat_takes_over_at_once_the_lock_of_a_beat_on_its_host_that_is_gone():
    url = _redis_url()
    if url is None:
        pytest.skip("no Redis on this machine (CI has one)")
    name = f"{beat.LOCK_NAME}:test-{id(object())}"
    child = os.fork()
    if child == 0:  # a beat that takes the lock and dies without releasing it
        held = beat.RedisBeatLock(url, name).hold()
        os._exit(0 if held else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the first beat did not take the lock"
    assert redis.Redis.from_url(url).pttl(name) > 20_000  # most of its lease still to run
    successor = beat.RedisBeatLock(url, name)
    try:
        assert successor.hold(), "stood by on the lock of a beat that is gone"
        # A live holder on this host keeps it: another beat stands by.
        assert not beat.RedisBeatLock(url, name).hold()
    finally:
        successor.release()


def test_a_beat_keeps_its_own_lock_when_redis_restarts_with_it(tmp_path):
    server = RedisServer(tmp_path / "redis").start()
    try:
        lock = beat.RedisBeatLock(server.url, f"{beat.LOCK_NAME}:test")
        assert lock.hold()
        server.stop()  # append-only: the lock's key comes back with Redis
        scheduler = beat.SingleBeatScheduler.__new__(beat.SingleBeatScheduler)
        scheduler.lock, scheduler.was_holding = lock, True
        # Cannot extend it meanwhile: not sending, and trying again soon.
        assert scheduler.tick() == beat.UNREACHABLE_SECONDS < beat.STANDBY_SECONDS
        assert not lock.held
        server.start()
        started = time.monotonic()
        assert lock.hold(), "stood by on its own lock after Redis came back"
        assert time.monotonic() - started < 1
        assert not beat.RedisBeatLock(server.url, f"{beat.LOCK_NAME}:test").hold()
    finally:
        server.stop()
