from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"

    def ready(self) -> None:
        # Configuration history and the audit of failed logins hang on Django's signals, so
        # they see every change and every failure, whichever page, API or command made it.
        from django.contrib.auth.signals import user_login_failed

        from portal import audit, history, hot

        history.connect()
        hot.connect()
        user_login_failed.connect(audit.on_login_failed, dispatch_uid="switchyard-login-failed")
