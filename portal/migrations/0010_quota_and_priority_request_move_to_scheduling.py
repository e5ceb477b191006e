"""Quotas and priority requests belong to scheduling now (its 0016 takes them over).

Only Django's picture of the models changes: the tables stay, with their rows, names,
constraints and indexes."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0009_project_slug_as_descriptors_write_it"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="PriorityRequest"),
                migrations.DeleteModel(name="Quota"),
            ],
            database_operations=[],
        ),
    ]
