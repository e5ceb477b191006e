"""Kept what-if runs survive the renaming of their workloads and of one criterion."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("scheduling", "0014_queue_name_as_descriptors_write_it")]
AFTER = [("scheduling", "0015_simulationrun_workloads_name_the_behaviour")]


def _model(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps.get_model("scheduling", "SimulationRun")


@pytest.mark.django_db(transaction=True)
def test_kept_runs_read_the_new_workload_and_criterion_names_and_migrate_back():
    old = _model(BEFORE)
    rows = [
        {"criterion": "agent mean wait", "target": "< 30 s", "values": {}, "passed": True},
        {"criterion": "R14 trainings: longest wait", "target": "<= 15 min", "values": {}},
    ]
    day = old.objects.create(
        workload="r14", parameters={"seed": 2}, result={"workload": "r14", "criteria": rows}
    )
    burst = old.objects.create(workload="r14-burst", result={"jobs": 53, "policies": {}})
    queued = old.objects.create(workload="swf", result=None)
    try:
        new = _model(AFTER)
        after = new.objects.get(pk=day.pk)
        assert after.workload == "validation-day"
        assert after.result["workload"] == "validation-day"
        names = [row["criterion"] for row in after.result["criteria"]]
        assert names == ["agent mean wait", "launch-mix trainings: longest wait"]
        assert after.parameters == {"seed": 2}
        assert new.objects.get(pk=burst.pk).workload == "launch-mix"
        assert new.objects.get(pk=burst.pk).result == {"jobs": 53, "policies": {}}
        assert (new.objects.get(pk=queued.pk).workload, new.objects.get(pk=queued.pk).result) == (
            "swf",
            None,
        )

        back = _model(BEFORE)
        assert back.objects.get(pk=day.pk).workload == "r14"
        assert back.objects.get(pk=day.pk).result == {"workload": "r14", "criteria": rows}
        assert back.objects.get(pk=burst.pk).workload == "r14-burst"
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
