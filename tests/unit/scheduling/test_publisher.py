"""The web process's publisher thread (scheduling/outbox.py), against the configured broker
(the filesystem broker here, Redis in CI): every id handed over leaves once, ids that gather
while the thread is busy leave together, a lone id leaves alone."""

from __future__ import annotations

from config.celery import app
from scheduling import outbox


def _purge() -> None:
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(app.conf.task_default_queue)


def _sent() -> list[tuple[str, list[int]]]:
    """The messages in the broker's queue: (task name, the ids it dispatches), consumed."""
    out = []
    with app.connection_for_read() as conn:
        queue = conn.SimpleQueue(app.conf.task_default_queue)
        try:
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    break
                args = message.decode()[0]
                ids = args[0] if message.headers["task"] == outbox.DISPATCH_MANY else [args[0]]
                out.append((message.headers["task"], ids))
                message.ack()
        finally:
            queue.close()
    return out


def test_ids_gathered_while_the_thread_is_busy_leave_together_each_once():
    _purge()
    ids = list(range(1, 61))
    # Held, the thread cannot send: the ids gather as they do while it sends the last batch.
    with outbox.PUBLISHER._cond:
        for task_id in ids:
            outbox.PUBLISHER.add(task_id)
    assert outbox.PUBLISHER.flush(10)
    sent = _sent()
    assert [name for name, _ in sent] == [outbox.DISPATCH_MANY] * 3
    # CHUNK ids a message at most. The filesystem broker names its messages by the millisecond
    # and a random id, so two sent in one millisecond come back in either order.
    assert sorted(len(batch) for _, batch in sent) == [10, 25, 25]
    assert sorted(i for _, batch in sent for i in batch) == ids


def test_a_lone_id_leaves_at_once_as_a_single_dispatch():
    _purge()
    outbox.PUBLISHER.add(99)
    assert outbox.PUBLISHER.flush(10)
    assert _sent() == [(outbox.DISPATCH, [99])]
