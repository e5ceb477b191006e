"""Quotas and priority requests move here from the portal app, tables and rows untouched.

The tables keep their names (portal_quota, portal_priorityrequest), so do their constraints
and indexes; only Django's picture of the models moves. What stores a model's label moves
with it: the content types (and so the permissions and admin log entries that point at
them) and the configuration history's versions of quotas. Migrating back moves them back.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ["quota", "priorityrequest"]


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


def _move_labels(apps, old: str, new: str) -> None:
    version = apps.get_model("portal", "ConfigVersion")
    for model in MOVED:
        _move_content_type(apps, model, old, new)
        version.objects.filter(model=f"{old}.{model}").update(model=f"{new}.{model}")


def forwards(apps, schema_editor):
    _move_labels(apps, "portal", "scheduling")


def backwards(apps, schema_editor):
    _move_labels(apps, "scheduling", "portal")


class Migration(migrations.Migration):
    dependencies = [
        ("admin", "0003_logentry_add_action_flag_choices"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("portal", "0010_quota_and_priority_request_move_to_scheduling"),
        ("scheduling", "0015_simulationrun_workloads_name_the_behaviour"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="PriorityRequest",
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
                            "level",
                            models.PositiveSmallIntegerField(
                                choices=[(0, "low"), (1, "medium"), (2, "high")]
                            ),
                        ),
                        ("reason", models.TextField()),
                        ("until", models.DateTimeField()),
                        (
                            "state",
                            models.CharField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("approved", "Approved"),
                                    ("rejected", "Rejected"),
                                    ("expired", "Expired"),
                                ],
                                default="pending",
                                max_length=10,
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("decided_at", models.DateTimeField(blank=True, null=True)),
                        ("comment", models.TextField(blank=True)),
                        (
                            "ended_at",
                            models.DateTimeField(
                                blank=True, help_text="When it expired.", null=True
                            ),
                        ),
                        (
                            "decided_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "project",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="priority_requests",
                                to="portal.project",
                            ),
                        ),
                        (
                            "queue",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="priority_requests",
                                to="scheduling.queue",
                            ),
                        ),
                        (
                            "requester",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="priority_requests",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "task",
                            models.ForeignKey(
                                blank=True,
                                help_text="Empty: every task of the project in the queue.",
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="priority_requests",
                                to="scheduling.task",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "portal_priorityrequest",
                        "ordering": ["-id"],
                        "indexes": [
                            models.Index(fields=["state", "until"], name="priority_request_live")
                        ],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("state", "pending")),
                                fields=("task",),
                                name="one_pending_priority_request_per_task",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Quota",
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
                            "resource",
                            models.CharField(
                                choices=[
                                    ("gpus", "GPUs"),
                                    ("cpus", "CPUs"),
                                    ("tasks", "Running tasks"),
                                    ("gpu_hours", "GPU-hours per period"),
                                    ("core_hours", "Core-hours per period"),
                                ],
                                max_length=10,
                            ),
                        ),
                        ("limit", models.PositiveIntegerField()),
                        (
                            "period",
                            models.CharField(
                                choices=[("day", "Day"), ("week", "Week"), ("month", "Month")],
                                default="month",
                                help_text="For GPU-hours and core-hours: the budget's period (site time zone).",
                                max_length=5,
                            ),
                        ),
                        (
                            "over_quota",
                            models.CharField(
                                choices=[
                                    ("queue", "Wait until there is room"),
                                    ("reject", "Refuse the task"),
                                ],
                                default="queue",
                                max_length=8,
                            ),
                        ),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "project",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quotas",
                                to="portal.project",
                            ),
                        ),
                        (
                            "queue",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quotas",
                                to="scheduling.queue",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                blank=True,
                                help_text="Empty: the whole project. Set: this member only.",
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="quotas",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "portal_quota",
                        "ordering": ["project", "queue", "user", "resource"],
                        "constraints": [
                            models.UniqueConstraint(
                                condition=models.Q(("user__isnull", True)),
                                fields=("project", "queue", "resource"),
                                name="one_project_quota_per_resource",
                            ),
                            models.UniqueConstraint(
                                condition=models.Q(("user__isnull", False)),
                                fields=("project", "queue", "user", "resource"),
                                name="one_user_quota_per_resource",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
