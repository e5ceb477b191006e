from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"

    def ready(self) -> None:
        # The composition root: reactions to a task's end are registered here, not called by
        # name from the state service (settling dependants and workflows is the engine's),
        # and the Celery tasks are registered in every process, so services publish them
        # by name without importing the engine (docs/architecture.md).
        from portal import history
        from scheduling import checks as _checks  # noqa: F401 - registers them
        from scheduling import hooks, notifications
        from scheduling import tasks as _celery_tasks  # noqa: F401 - registers them
        from scheduling.engine import admission, registry, sandboxes, settle, usage
        from scheduling.engine import checks as _engine_checks  # noqa: F401 - registers them
        from scheduling.selectors import site_view_invalidate

        hooks.on_task_end(settle.after_ends)
        hooks.on_task_end(admission.after_ends)  # what it held is free: held tasks may start
        hooks.on_task_end(notifications.on_tasks_end)
        hooks.on_task_end(sandboxes.after_ends)  # a live sandbox ends with its task
        hooks.provide_accounting(usage.READER)  # accounting reads the backends' through it
        hooks.provide_backends_close(registry.close_backends)  # `manage.py up` at its end
        history.config_changed.connect(
            lambda **_: site_view_invalidate(), dispatch_uid="switchyard-site-view"
        )
