"""Workflows on the fake backend run Celery eagerly and are driven through a `Flow`."""

from tests.unit.scheduling.workflows.helpers import (  # noqa: F401 - fixtures
    _eager_celery,
    flow,
)
