"""What-if runs move here from the scheduling app, table and rows untouched.

The table keeps its name (scheduling_simulationrun); only Django's picture of the model
moves, and its content type (and so its permissions and admin log entries) with it.
Migrating back moves the content type back. Runs are not configuration: the configuration
history holds none.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _move_content_type(apps, model: str, old: str, new: str) -> None:
    """Give the model's content type its new app label.

    A row for the new label may exist already: the new code makes one when it first asks
    for the model's content type, if it ran before this migration. The old row (the one
    permissions were granted and log entries written on) keeps its id; the new row's log
    entries and grants join it, and the new row goes.
    """
    content_type = apps.get_model("contenttypes", "ContentType")
    permission = apps.get_model("auth", "Permission")
    log_entry = apps.get_model("admin", "LogEntry")
    found = content_type.objects.filter(app_label=old, model=model).first()
    if found is None:
        return
    stale = content_type.objects.filter(app_label=new, model=model).first()
    if stale is not None:
        log_entry.objects.filter(content_type=stale).update(content_type=found)
        for perm in permission.objects.filter(content_type=stale):
            twin = permission.objects.filter(content_type=found, codename=perm.codename).first()
            if twin is None:
                perm.content_type = found
                perm.save(update_fields=["content_type"])
                continue
            twin.group_set.add(*perm.group_set.all())
            twin.user_set.add(*perm.user_set.all())
            perm.delete()
        stale.delete()
    found.app_label = new
    found.save(update_fields=["app_label"])


def forwards(apps, schema_editor):
    _move_content_type(apps, "simulationrun", "scheduling", "simulation")


def backwards(apps, schema_editor):
    _move_content_type(apps, "simulationrun", "simulation", "scheduling")


class Migration(migrations.Migration):
    dependencies = [
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("scheduling", "0017_simulation_run_moves_to_simulation"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SimulationRun",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "workload",
                            models.CharField(
                                choices=[
                                    ("validation-day", "validation day: the criteria"),
                                    ("launch-mix", "launch mix alone, on the idle site"),
                                    ("history", "the portal's own history"),
                                    ("swf", "an SWF trace (upload)"),
                                ],
                                max_length=16,
                            ),
                        ),
                        (
                            "parameters",
                            models.JSONField(
                                default=dict,
                                help_text="What the run was asked: seed, policies, days, limit, repeat.",
                            ),
                        ),
                        (
                            "upload",
                            models.CharField(
                                blank=True,
                                help_text="swf: the trace, as a path under SWITCHYARD_SIMULATION_DIR.",
                                max_length=255,
                            ),
                        ),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("queued", "Queued"),
                                    ("running", "Running"),
                                    ("succeeded", "Succeeded"),
                                    ("failed", "Failed"),
                                ],
                                default="queued",
                                max_length=10,
                            ),
                        ),
                        (
                            "progress",
                            models.PositiveSmallIntegerField(default=0, help_text="Percent done."),
                        ),
                        ("result", models.JSONField(blank=True, null=True)),
                        ("error", models.TextField(blank=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_by",
                            models.ForeignKey(
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "scheduling_simulationrun",
                        "ordering": ["-id"],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
