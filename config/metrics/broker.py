"""How many Celery messages wait in each queue, read from the broker when `/metrics` is
scraped: Redis list lengths (kombu keeps a queue's priorities in lists of their own), or the
message files of the embedded filesystem broker (config/runtime/broker.py)."""

from __future__ import annotations

from pathlib import Path

import redis
from django.conf import settings

# kombu's Redis transport: priorities 3, 6 and 9 go to `<queue>\x06\x16<priority>`.
_PRIORITY_SEPARATOR = "\x06\x16"
_PRIORITY_STEPS = (3, 6, 9)


def redis_keys(queue: str) -> list[str]:
    return [queue, *(f"{queue}{_PRIORITY_SEPARATOR}{step}" for step in _PRIORITY_STEPS)]


def queue_lengths() -> dict[str, int]:
    """Queue name → messages waiting in it."""
    queues = sorted(settings.CELERY_TASK_QUEUES)
    if settings.REDIS_URL:
        return _redis_lengths(settings.REDIS_URL, queues)
    folder = str(settings.CELERY_BROKER_TRANSPORT_OPTIONS["data_folder_in"])
    return folder_lengths(Path(folder), queues)


def _redis_lengths(url: str, queues: list[str]) -> dict[str, int]:
    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            for key in redis_keys(queue):
                pipe.llen(key)
        found = pipe.execute()
    finally:
        client.close()
    steps = len(_PRIORITY_STEPS) + 1
    return {queue: sum(found[i * steps : (i + 1) * steps]) for i, queue in enumerate(queues)}


def folder_lengths(folder: Path, queues: list[str]) -> dict[str, int]:
    """The filesystem transport names a message `<time>_<uuid>.<queue>.msg`."""
    counts = dict.fromkeys(queues, 0)
    if not folder.is_dir():
        return counts
    for path in folder.iterdir():
        name = path.name
        if not name.endswith(".msg"):
            continue
        queue = name[: -len(".msg")].rpartition(".")[2]
        if queue in counts:
            counts[queue] += 1
    return counts
