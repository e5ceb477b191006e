"""The default site's pools, queues and routing rules, for the policy functions' tests."""

from tests.unit.scheduling.decisions.helpers import (  # noqa: F401 - fixtures
    pools,
    queues,
    rules,
)
