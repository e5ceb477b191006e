from django.apps import AppConfig


class RuntimeConfig(AppConfig):
    """The processes that run the portal: `manage.py up` and `manage.py serve`."""

    name = "config.runtime"
    label = "runtime"
