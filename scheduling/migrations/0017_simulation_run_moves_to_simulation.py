"""What-if runs belong to the simulation app now (its 0001 takes them over).

Only Django's picture of the model changes: the table scheduling_simulationrun stays."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0016_quota_and_priority_request_move_here"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SimulationRun")],
            database_operations=[],
        ),
    ]
