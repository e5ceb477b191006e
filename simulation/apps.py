from django.apps import AppConfig


class SimulationConfig(AppConfig):
    """What-if runs of the scheduling policy: the pure simulator, its runs, pages and command."""

    name = "simulation"
