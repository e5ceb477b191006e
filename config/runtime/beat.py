"""One beat for the whole site, however many are started (docs/deployment.md, "Scale out").

Celery beat sends the periodic passes (polls, policy, capacity, metering…). Two beats would
send each twice; the passes are safe to repeat (their own locks, config/locks.py)
but the load doubles and nothing says which beat is the real one. So a beat sends only while
it holds the site's beat lock:

- with Redis (`REDIS_URL`: several hosts), a Redis lock (redis-py's `Lock`) with a time to
  live of `LEASE_SECONDS`, extended on every tick; a beat that dies frees it within that time
  and a standby beat takes over. The lock's value names its holder (host, pid, the process's
  start time): a beat that finds the lock still held by itself (its extension failed while
  Redis restarted, and Redis kept the key) keeps it, and one that finds it held by a beat of
  its own host that is gone (killed, or the container restarted) takes it over at once rather
  than standing by for the rest of the lease;
- on the embedded default (one machine), a file lock beside the database, held for the
  process's life.

A beat without the lock is a standby: it ticks every few seconds, trying to take the lock, and
sends nothing.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import sys
import threading
import uuid
from pathlib import Path

import redis
from celery.beat import PersistentScheduler
from django.conf import settings

from config.metrics import instruments

log = logging.getLogger(__name__)

LEASE_SECONDS = 30  # a killed beat's lock frees after this long (a stopped one frees it at once)
STANDBY_SECONDS = 5  # how often a standby beat tries to take the lock
UNREACHABLE_SECONDS = 1  # how soon a beat that could not reach Redis tries again
LOCK_NAME = "switchyard:beat"


def _start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot), or None if there is none: with the
    pid it tells a process from a later one that reuses its pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22; the name before ")" may hold spaces


def holder_token(pid: int | None = None) -> str:
    """This process's name on the lock: host, pid, start time, and a nonce per lock."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()} {pid} {_start_time(pid)} {uuid.uuid4().hex}"


def holder_gone(token: str) -> bool:
    """Whether the holder named by `token` is a process of this host that no longer runs.

    A holder on another host cannot be asked: its lease runs out instead. Another lock of this
    very process (same pid and start time) is alive.
    """
    try:
        host, pid, started, _nonce = token.split(" ")
        pid_number = int(pid)
    except ValueError:
        return False  # not a beat's token: leave it to its lease
    if host != socket.gethostname():
        return False
    return _start_time(pid_number) != started


# Set the lock to a new holder only if it still has the one that was found gone.
_TAKE_OVER = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('set', KEYS[1], ARGV[2], 'PX', ARGV[3]) and 1 or 0
end
return 0
"""


class RedisBeatLock:
    def __init__(self, url: str, name: str) -> None:
        self.name = name
        self._redis = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
        self._lock = self._redis.lock(
            name, timeout=LEASE_SECONDS, blocking=False, thread_local=False
        )
        self.token = holder_token()
        self.held = False
        self.reachable = True  # whether the last try reached Redis

    def hold(self) -> bool:
        """Take or keep the lock; whether this beat holds it now."""
        try:
            if self.held and self._lock.reacquire():  # extend: still ours
                self.reachable = True
                return True
            self.held = bool(self._lock.acquire(blocking=False, token=self.token))
            if not self.held:
                self.held = self._reclaim()
            self.reachable = True
        except Exception:  # noqa: BLE001 - Redis down or the lock lost: not the beat now
            log.warning("beat lock: Redis unreachable or the lock was lost", exc_info=True)
            self.held = False
            self.reachable = False
        return self.held

    def _reclaim(self) -> bool:
        """The lock is taken: keep it if it is this beat's own, take it from a dead holder."""
        found = self._redis.get(self.name)
        if found is None:
            return False  # freed meanwhile: the next tick takes it
        # A client without decode_responses: bytes (redis-py types it as either).
        holder = found.decode(errors="replace") if isinstance(found, bytes) else str(found)
        if holder == self.token:
            # Ours still: an extension failed (Redis restarting) but Redis kept the key.
            self._lock.local.token = self.token.encode()
            return bool(self._lock.reacquire())
        if not holder_gone(holder):
            return False
        lease_ms = int(LEASE_SECONDS * 1000)
        if not self._redis.eval(_TAKE_OVER, 1, self.name, holder, self.token, lease_ms):
            return False
        self._lock.local.token = self.token.encode()
        log.warning("beat lock: taken over at once from a beat that is gone (%s)", holder)
        return True

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                self._lock.release()
            except Exception:  # noqa: BLE001 - expired or Redis gone: nothing to free
                log.info("beat lock: nothing to release", exc_info=True)


class FileBeatLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def hold(self) -> bool:
        if self._fd is not None:
            return True
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # frees the lock
            self._fd = None


def beat_lock() -> RedisBeatLock | FileBeatLock:
    """The lock of this site: one per database (a test database is a site of its own)."""
    database = Path(str(settings.DATABASES["default"]["NAME"])).name
    if settings.REDIS_URL:
        return RedisBeatLock(settings.REDIS_URL, f"{LOCK_NAME}:{database}")
    return FileBeatLock(Path(settings.VAR_DIR) / f".beat-{database}.lock")


class SingleBeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler, sending only while this beat holds the site's lock."""

    def __init__(self, *args, **kwargs) -> None:
        self.lock = beat_lock()
        self.was_holding: bool | None = None
        super().__init__(*args, **kwargs)
        # A beat inside a worker (`-B`) is stopped with SIGTERM and would die holding the
        # lock until it expires; leave through close() instead (beat's own loop calls it).
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    def close(self) -> None:
        try:
            super().close()
        finally:
            self.lock.release()

    def tick(self, *args, **kwargs) -> float:
        holding = self.lock.hold()
        reachable = getattr(self.lock, "reachable", True)
        if holding != self.was_holding:
            log.warning(
                "beat on %s: %s",
                socket.gethostname(),
                "sending the periodic passes"
                if holding
                else "standby (another beat holds the lock)"
                if reachable
                else "standby (Redis unreachable)",
            )
            self.was_holding = holding
        if not holding:
            # Redis restarting: try again soon, to send again as soon as it is back.
            return STANDBY_SECONDS if reachable else UNREACHABLE_SECONDS
        instruments.beat_alive()  # only the beat that sends (docs/operations.md, "Metrics")
        return min(super().tick(*args, **kwargs), LEASE_SECONDS / 3)
