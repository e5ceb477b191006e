"""Kept what-if runs survive the renaming of the validation day's criterion."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("scheduling", "0014_queue_name_as_descriptors_write_it")]
AFTER = [("scheduling", "0015_simulationrun_labels_name_the_behaviour")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_a_kept_run_reads_the_launch_mix_criterion_after_migrating_and_back():
    old = _migrate(BEFORE)
    SimulationRun = old.get_model("scheduling", "SimulationRun")
    rows = [
        {"criterion": "agent mean wait", "target": "< 30 s", "values": {}, "passed": True},
        {"criterion": "R14 trainings: longest wait", "target": "<= 15 min", "values": {}},
    ]
    kept = SimulationRun.objects.create(workload="r14", result={"criteria": rows, "seed": 2})
    running = SimulationRun.objects.create(workload="swf", result=None)
    try:
        new = _migrate(AFTER).get_model("scheduling", "SimulationRun")
        names = [row["criterion"] for row in new.objects.get(pk=kept.pk).result["criteria"]]
        assert names == ["agent mean wait", "launch-mix trainings: longest wait"]
        assert new.objects.get(pk=kept.pk).result["seed"] == 2
        assert new.objects.get(pk=kept.pk).workload == "r14"  # the stored value is kept
        assert new.objects.get(pk=running.pk).result is None

        back = _migrate(BEFORE).get_model("scheduling", "SimulationRun")
        assert (
            back.objects.get(pk=kept.pk).result["criteria"][1]["criterion"] == rows[1]["criterion"]
        )
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
