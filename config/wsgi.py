import os

from django.core.wsgi import get_wsgi_application
from django.urls import reverse

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()

# Django builds its table of URL names on the first reverse(); in a threaded worker every
# thread of a fresh process would build it at once inside its first request. Built here, at
# the worker's start, instead (no database is touched).
reverse("api-task-detail", args=[1])
