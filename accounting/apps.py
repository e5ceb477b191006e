from django.apps import AppConfig


class AccountingConfig(AppConfig):
    name = "accounting"
