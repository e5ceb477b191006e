"""The access matrix: every role gets exactly what it may (helpers.py has the rows)."""

from __future__ import annotations

import pytest

from tests.unit.portal.access_matrix.helpers import (
    CASES,
    ROLES,
    _call,
    _denied,
)


@pytest.mark.parametrize("role", ROLES)
def test_every_role_gets_exactly_what_it_may(world, role):
    leaks = []
    for case in CASES:
        response = _call(case, role, world)
        allowed = role in case.allowed
        if allowed:
            ok = response.status_code < 400 or (response.status_code == 409 and case.effect is None)
        else:
            ok = _denied(response, case, role)
        if case.effect is not None and ok:
            happened = bool(case.effect(world))
            ok = happened == allowed
        if not ok:
            leaks.append(f"{case.name}: {role} got {response.status_code}")
    assert leaks == []
