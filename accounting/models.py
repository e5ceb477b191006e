from django.db import models  # noqa: F401  (usage records arrive with the accounting issue)
