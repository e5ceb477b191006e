"""The Submit page's example workflow, as shipped, on a real Slurm: API submit → a real
Celery worker (with beat) → batch jobs on the localhost cluster, which shares this machine's
folders as a site's shared file system would (what it checks:
tests/integration/example_workflow.py)."""

from __future__ import annotations

import pytest

from tests.integration.example_workflow import run_the_example

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.django_db(transaction=True)]


def test_the_example_workflow_passes_data_between_steps_and_waits_on_the_flag(
    api, alice_account, storage_root, start_worker, slurm_env
):
    proc = start_worker(extra_env={"SWITCHYARD_TRIGGER_MS": "300"})
    tasks = run_the_example(api, storage_root, proc, timeout=180)
    assert all(t.backend == "slurm" and t.backend_id for t in tasks)
