from django.apps import AppConfig


class SimulationConfig(AppConfig):
    """What-if runs of the scheduling policy: the pure simulator, its runs, pages and command."""

    name = "simulation"

    def ready(self) -> None:
        # Registered in every process: a start publishes the task by name (services.RUN_QUEUED).
        from simulation import tasks as _celery_tasks  # noqa: F401 - registers them
