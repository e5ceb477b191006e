"""The what-if workloads and one criterion are named for what they are.

`r14` becomes `validation-day` and `r14-burst` becomes `launch-mix`: the value is what the
pages, the compare table and `manage.py simulate` show. Kept runs are rewritten (their
workload, the workload their result records, and the criterion name in it), so old and new
runs read alike; the old names stay accepted as aliases where a user sends them
(`simulate`, the start form). Reversible.
"""

from django.db import migrations, models

WORKLOADS = {"r14": "validation-day", "r14-burst": "launch-mix"}
CRITERIA = {"R14 trainings: longest wait": "launch-mix trainings: longest wait"}


def _rewrite(apps, workloads: dict[str, str], criteria: dict[str, str]) -> None:
    SimulationRun = apps.get_model("scheduling", "SimulationRun")
    for old, new in workloads.items():
        SimulationRun.objects.filter(workload=old).update(workload=new)
    for run in SimulationRun.objects.filter(result__isnull=False).only("id", "result"):
        result = run.result
        if not isinstance(result, dict):
            continue
        changed = False
        if result.get("workload") in workloads:
            result["workload"] = workloads[result["workload"]]
            changed = True
        for row in result.get("criteria") or []:
            if isinstance(row, dict) and row.get("criterion") in criteria:
                row["criterion"] = criteria[row["criterion"]]
                changed = True
        if changed:
            SimulationRun.objects.filter(pk=run.pk).update(result=result)


def forwards(apps, schema_editor) -> None:
    _rewrite(apps, WORKLOADS, CRITERIA)


def backwards(apps, schema_editor) -> None:
    _rewrite(
        apps,
        {new: old for old, new in WORKLOADS.items()},
        {new: old for old, new in CRITERIA.items()},
    )


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
                    ("validation-day", "validation day: the criteria"),
                    ("launch-mix", "launch mix alone, on the idle site"),
                    ("history", "the portal's own history"),
                    ("swf", "an SWF trace (upload)"),
                ],
                max_length=16,
            ),
        ),
        migrations.RunPython(forwards, backwards),
    ]
