"""Celery tasks: ids in, call the engine. Retries live here."""

from __future__ import annotations

from celery import shared_task

from scheduling import engine


@shared_task(
    name="scheduling.dispatch",
    bind=True,
    acks_late=True,
    max_retries=None,
    autoretry_for=(engine.DispatchRetry,),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
)
def dispatch(self, task_id: int) -> str:
    return engine.task_dispatch(task_id)


@shared_task(name="scheduling.dispatch_many", acks_late=True)
def dispatch_many(task_ids: list[int]) -> int:
    """A batch's tasks, in order; each dispatch is idempotent, so a redelivery is harmless."""
    done = 0
    for task_id in task_ids:
        try:
            engine.task_dispatch(task_id)
            done += 1
        except engine.DispatchRetry:
            dispatch.apply_async((task_id,), countdown=2)  # that one backs off alone
    return done


@shared_task(name="scheduling.poll_backends", acks_late=True)
def poll_backends() -> int:
    return sum(engine.backend_poll(alias) for alias in engine.active_backends())


@shared_task(name="scheduling.sweep_pending", acks_late=True)
def sweep_pending() -> int:
    ids = engine.sweep_pending()
    for task_id in ids:
        dispatch.delay(task_id)
    return len(ids)


@shared_task(name="scheduling.timers", acks_late=True)
def timers() -> int:
    """Wait timeouts and trigger files: the engine's only clock-driven releases."""
    from scheduling import workflows

    return workflows.expire_waiting() + workflows.check_triggers()
