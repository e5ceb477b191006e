from django.conf import settings
from django.db import migrations, models
from django.db.models import Count, Min
from django.utils import timezone


def expire_duplicates(apps, schema_editor):
    """Before the constraint: of two pending requests for one task (possible before it, when
    two were sent at once), the oldest stays pending and the others expire."""
    request = apps.get_model("portal", "PriorityRequest")
    doubled = (
        request.objects.filter(state="pending", task__isnull=False)
        .values("task_id")
        .annotate(n=Count("id"), first=Min("id"))
        .filter(n__gt=1)
    )
    for row in doubled:
        request.objects.filter(state="pending", task_id=row["task_id"]).exclude(
            pk=row["first"]
        ).update(state="expired", ended_at=timezone.now())


class Migration(migrations.Migration):
    dependencies = [
        ("portal", "0007_canary_audit"),
        ("scheduling", "0013_quota_held_index"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunPython(expire_duplicates, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="priorityrequest",
            constraint=models.UniqueConstraint(
                condition=models.Q(("state", "pending")),
                fields=("task",),
                name="one_pending_priority_request_per_task",
            ),
        ),
    ]
