from __future__ import annotations

import os

from celery import Celery

from portal import broker

broker.register()

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("switchyard")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
