"""The what-if workloads' labels and one criterion name say what they are.

The stored workload values (`r14`, `r14-burst`) stay: they are what scripts and bookmarks
send. The criterion name is stored in each finished run's result, so kept runs are rewritten
to the new name: their pages then say what a new run's do.
"""

from django.db import migrations, models

OLD = "R14 trainings: longest wait"
NEW = "launch-mix trainings: longest wait"


def _rename(apps, old: str, new: str) -> None:
    SimulationRun = apps.get_model("scheduling", "SimulationRun")
    for run in SimulationRun.objects.filter(result__isnull=False).only("id", "result"):
        criteria = (run.result or {}).get("criteria") if isinstance(run.result, dict) else None
        if not criteria:
            continue
        changed = False
        for row in criteria:
            if isinstance(row, dict) and row.get("criterion") == old:
                row["criterion"] = new
                changed = True
        if changed:
            SimulationRun.objects.filter(pk=run.pk).update(result=run.result)


def forwards(apps, schema_editor) -> None:
    _rename(apps, OLD, NEW)


def backwards(apps, schema_editor) -> None:
    _rename(apps, NEW, OLD)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0014_queue_name_as_descriptors_write_it"),
    ]

    operations = [
        migrations.AlterField(
            model_name="simulationrun",
            name="workload",
            field=models.CharField(
                choices=[
                    ("r14", "validation day: the criteria"),
                    ("r14-burst", "launch mix alone, on the idle site"),
                    ("history", "the portal's own history"),
                    ("swf", "an SWF trace (upload)"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
