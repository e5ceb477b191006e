"""The Submit page's example workflow, as shipped, end to end: API submit → a real Celery
worker (with beat) → local-backend jobs in bubblewrap on the demo site's storage areas
(what it checks: tests/integration/example_workflow.py)."""

from __future__ import annotations

import os

import pytest

from tests.conftest import in_ci
from tests.integration.example_workflow import run_the_example

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

if os.geteuid() != 0 and not in_ci():
    pytestmark.append(pytest.mark.skip("jobs run as other accounts only when the worker is root"))


def test_the_example_workflow_passes_data_between_steps_and_waits_on_the_flag(
    api, alice_account, storage_root, start_worker
):
    proc = start_worker(extra_env={"SWITCHYARD_TRIGGER_MS": "300"})
    run_the_example(api, storage_root, proc, timeout=90)
