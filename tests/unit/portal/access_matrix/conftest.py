"""The access matrix's world: one object of each kind, and a user of each role."""

from tests.unit.portal.access_matrix.helpers import (  # noqa: F401 - fixtures
    world,
)
