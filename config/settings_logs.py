"""Settings of the logs and of the address allow-lists (docs/operations.md, "Logs";
docs/security.md, "Address allow-lists"). config/settings.py imports them by name."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_list, env_networks, env_str
from config.logformat import logging_config

# One JSON object a line (for a log collector), or text (for a person at a terminal). JSON
# unless DJANGO_DEBUG is on; `manage.py up` (`make run`) writes text unless told otherwise.
SWITCHYARD_LOG_FORMAT = (
    env_str("SWITCHYARD_LOG_FORMAT") or ("text" if env_bool("DJANGO_DEBUG") else "json")
).strip()
if SWITCHYARD_LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(
        f"SWITCHYARD_LOG_FORMAT: expected json or text, got {SWITCHYARD_LOG_FORMAT!r}"
    )
LOGGING = logging_config(fmt=SWITCHYARD_LOG_FORMAT, level=env_str("LOG_LEVEL", "INFO"))

# Who may reach the admin console and the console pages of admins: comma-separated addresses
# or CIDR networks, as config.proxies.client_address sees the client (behind a trusted proxy
# the forwarded address). Empty, the default: everyone (the demo); a deployment sets it.
SWITCHYARD_ADMIN_ALLOW = env_networks("SWITCHYARD_ADMIN_ALLOW")
# The pages it guards, by path prefix: the admin console, configuration history and canary
# rules, capacity (drains, loans), the site dashboard, simulations, reconciliation.
SWITCHYARD_ADMIN_PATHS = env_list(
    "SWITCHYARD_ADMIN_PATHS",
    [
        "/admin/",
        "/config/",
        "/capacity/",
        "/dashboard/site/",
        "/simulations/",
        "/usage/reconciliation/",
    ],
)
for _path in SWITCHYARD_ADMIN_PATHS:
    if not _path.startswith("/"):
        raise ImproperlyConfigured(
            f"SWITCHYARD_ADMIN_PATHS: expected path prefixes starting with /, got {_path!r}"
        )
