"""Load samples: every queue's waiting and running work, once a minute (docs/console.md).

One grouped query over the unfinished tasks (the state index keeps it off the finished
ones), one row per queue. The admins' dashboard draws utilisation and queue depth over time
from them; a month of samples is kept.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from scheduling.models import LoadSample
from scheduling.selectors.load import load_now

KEEP = timedelta(days=31)


def take_sample(now: datetime | None = None) -> int:
    now = now or timezone.now()
    load = load_now()
    LoadSample.objects.bulk_create(
        LoadSample(at=now, queue_id=q, waiting=w, running=r, cpus_busy=c, gpus_busy=g)
        for q, (w, r, c, g) in load.items()
    )
    LoadSample.objects.filter(at__lt=now - KEEP).delete()
    return len(load)
