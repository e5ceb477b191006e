"""Reseal every stored secret_env value with the first configured key (after a rotation).

Put the new key first in SWITCHYARD_SECRETS_KEY (the old one after it), run this, then drop
the old key. Ended tasks are resealed too: their values are not needed again, but a copy of
the database must not be opened by the old key either (docs/security.md).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand
from django.db import transaction

from scheduling import sealed
from scheduling.models import Task


class Command(BaseCommand):
    help = "Reseal every task's secret_env with the first key of SWITCHYARD_SECRETS_KEY."

    def handle(self, *args, **options) -> None:
        done = 0
        ids = list(Task.objects.filter(spec__has_key="secret_env").values_list("pk", flat=True))
        for start in range(0, len(ids), 500):
            with transaction.atomic():
                rows = Task.objects.select_for_update().filter(pk__in=ids[start : start + 500])
                for task in rows:
                    stored = task.spec.get("secret_env") or {}
                    if not stored:
                        continue
                    try:
                        task.spec = {**task.spec, "secret_env": sealed.reseal(stored)}
                    except sealed.InvalidToken:
                        self.stderr.write(
                            f"task {task.pk}: its secret_env opens with none of the keys; left"
                        )
                        continue
                    task.save(update_fields=["spec"])
                    done += 1
        self.stdout.write(f"resealed the secret_env of {done} tasks")
