"""Switchyard settings.

Defaults run with no server at all: SQLite, Celery on kombu's filesystem transport, the local
backend. `DATABASE_URL` switches to PostgreSQL, `REDIS_URL` to a Redis broker.

This module is long on purpose: Django reads its settings from one module, and each setting
here sits beside the reason for its default; parts star-imported from other modules would
hide where a name comes from.
"""

from __future__ import annotations

import importlib.util
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.content_security import CONTENT_SECURITY_POLICY  # noqa: F401 - a setting
from config.credentials import credential_problems, with_password
from config.env import env_bool, env_int, env_list, env_networks, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("SWITCHYARD_VAR_DIR", str(BASE_DIR / "var")))

# What the portal writes (database, broker messages, logs) is private to its own user: jobs
# run as other accounts (docs/security.md). The var folder itself may be passed through, so
# that a job's account reaches its own work folder below it, but not listed.
os.umask(0o077)
VAR_DIR.mkdir(parents=True, exist_ok=True)
if VAR_DIR.stat().st_uid == os.geteuid():
    VAR_DIR.chmod(0o711)

DEBUG = env_bool("DJANGO_DEBUG", default=False)
# A secret from the environment, or the one `make run` generated in var/ for this install;
# never a key written in the code (docs/security.md).
_secret_file = VAR_DIR / "secret-key"
SECRET_KEY = env_str("DJANGO_SECRET_KEY") or (
    _secret_file.read_text().strip() if _secret_file.is_file() else None
)
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY (or DJANGO_SECRET_KEY_FILE) is not set and there is no "
            f"{_secret_file}: set one (`make run` generates it), or DJANGO_DEBUG=1 for "
            "development"
        )
    SECRET_KEY = "insecure-debug-only-key"
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# Behind TLS (SWITCHYARD_TLS=1): HTTPS only, HSTS, cookies that never travel in clear.
TLS = env_bool("SWITCHYARD_TLS", default=False)
SECURE_SSL_REDIRECT = TLS
SESSION_COOKIE_SECURE = TLS
CSRF_COOKIE_SECURE = TLS
SECURE_HSTS_SECONDS = env_int("SWITCHYARD_HSTS_SECONDS", 31_536_000) if TLS else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = TLS and env_bool("SWITCHYARD_HSTS_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = TLS and env_bool("SWITCHYARD_HSTS_PRELOAD", default=True)
# The reverse proxies whose forwarding headers are believed (config/proxies.py): none by
# default, not even this host's own addresses, where a job may connect from.
TRUSTED_PROXIES = env_networks("SWITCHYARD_TRUSTED_PROXIES")
if env_str("SWITCHYARD_FORWARDED_ALLOW_IPS") is not None:
    raise ImproperlyConfigured(
        "SWITCHYARD_FORWARDED_ALLOW_IPS is replaced by SWITCHYARD_TRUSTED_PROXIES (the web "
        "server and the portal now trust the same proxies): rename it"
    )
if env_bool("SWITCHYARD_BEHIND_PROXY", default=False):
    # The TLS-terminating proxy says so. Only trusted proxies' headers reach this far
    # (config.proxies.ForwardingHeaders drops everyone else's), so name them.
    if not TRUSTED_PROXIES:
        raise ImproperlyConfigured(
            "SWITCHYARD_BEHIND_PROXY=1 needs SWITCHYARD_TRUSTED_PROXIES: the proxy's "
            "address, whose X-Forwarded-Proto is believed; got none"
        )
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_AGE = env_int("SWITCHYARD_SESSION_SECONDS", 12 * 3600)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",
    "axes",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "portal",
    "scheduling",
    "accounting",
    "simulation",
    "config.runtime",
]

MIDDLEWARE = [
    # First: forwarding headers count only from a trusted proxy (docs/security.md).
    "config.proxies.ForwardingHeaders",
    "django.middleware.security.SecurityMiddleware",
    # A strict Content-Security-Policy on every answer (CONTENT_SECURITY_POLICY below).
    "csp.middleware.CSPMiddleware",
    # Static files from the web server's own processes, compressed and cached (docs/deployment.md).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "config.middleware.QueryStringGuard",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A body over its path's limit is refused before the CSRF check or a view reads it.
    "config.middleware.BodyLimit",
    # Who is acting, for the audit log and the configuration history (docs/console.md).
    "portal.audit.RequestContext",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last: it answers a login that was locked out (too many failures) with a 429.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.roles.context",
            ],
        },
    },
]

_sqlite_path = VAR_DIR / "switchyard.sqlite3"
DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{_sqlite_path}", conn_max_age=60
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, worker, beat) share one file: wait for the lock instead of
    # failing, and let readers run beside the one writer.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # A file, not memory, so a test can share its database with a worker process it starts;
    # one per test process, so concurrent test runs never share one.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / f"test-{os.getpid()}.sqlite3")}

# The password may be kept apart from the URL (DATABASE_PASSWORD_FILE: a secret), so that the
# URL is no secret (docker/compose.yaml).
if (_password := env_str("DATABASE_PASSWORD")) and not DATABASES["default"].get("PASSWORD"):
    DATABASES["default"]["PASSWORD"] = _password

# A database file made before the portal set its umask: make it private now.
if (
    DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3"
    and _sqlite_path.exists()
    and _sqlite_path.stat().st_uid == os.geteuid()
):
    _sqlite_path.chmod(0o600)

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    # Not a rule: it revokes every API token of a user whose password changes.
    {"NAME": "portal.auth.RevokeTokensOnPasswordChange"},
]
AUTHENTICATION_BACKENDS = [
    # Counts failed logins and refuses a locked-out (username, address) pair.
    "axes.backends.AxesStandaloneBackend",
    # Past the per-username ceiling, paces that username's attempts (portal/auth.py).
    "portal.auth.UsernamePace",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("SWITCHYARD_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("SWITCHYARD_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "portal.auth.lockout_response"
AXES_VERBOSE = False
AXES_CLIENT_IP_CALLABLE = "config.proxies.client_address"
AXES_HANDLER = "portal.auth.LoginAttempts"
# Failures for one username from any addresses: past the ceiling each further attempt waits
# its turn (1 s, doubling, at most the pace), never the cool-off (docs/security.md).
SWITCHYARD_LOGIN_USERNAME_CEILING = env_int("SWITCHYARD_LOGIN_USERNAME_CEILING", 10)
SWITCHYARD_LOGIN_PACE_MAX_SECONDS = env_int("SWITCHYARD_LOGIN_PACE_MAX_SECONDS", 30)
# An address the user logged in from this recently is not paced.
SWITCHYARD_LOGIN_KNOWN_ADDRESS_DAYS = env_int("SWITCHYARD_LOGIN_KNOWN_ADDRESS_DAYS", 30)
for _name in ("USERNAME_CEILING", "PACE_MAX_SECONDS", "KNOWN_ADDRESS_DAYS"):
    _value = globals()[f"SWITCHYARD_LOGIN_{_name}"]
    if _value < 1:
        raise ImproperlyConfigured(
            f"SWITCHYARD_LOGIN_{_name}: expected a whole number of at least 1, got {_value}"
        )
# API tokens (django-rest-knox): hashed in the database, expiring, revocable one by one.
REST_KNOX = {
    "TOKEN_TTL": timedelta(hours=env_int("SWITCHYARD_TOKEN_TTL_HOURS", 30 * 24)),
    "AUTH_HEADER_PREFIX": "Token",
    "TOKEN_LIMIT_PER_USER": None,
}

# How long a web process keeps who a token is and who belongs to which project (portal/hot.py).
SWITCHYARD_AUTH_CACHE_SECONDS = env_int("SWITCHYARD_AUTH_CACHE_SECONDS", 10)

# Redis's password likewise (REDIS_PASSWORD_FILE).
_redis_url = with_password(env_str("REDIS_URL"), env_str("REDIS_PASSWORD"))
# The cache is where request-rate throttles count: shared by every web process.
CACHES = {
    "default": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": _redis_url,
            "KEY_PREFIX": "switchyard-cache",
        }
        if _redis_url
        else {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(VAR_DIR / "cache"),
        }
    )
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImproperlyConfigured(f"the {name} package is not installed (make install)")
    return Path(spec.origin).parent


STATIC_URL = "static/"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    # plotly.js as the pinned plotly package ships it (the usage charts; docs/accounting.md).
    ("vendor/plotly", _package_dir("plotly") / "package_data"),
]
STATIC_ROOT = VAR_DIR / "staticfiles"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise reads it at start; collectstatic fills it
# `manage.py up` and the container image collect static files with content-hashed names (cached
# for a year by browsers, config/runtime/serve.py); elsewhere (tests, a bare checkout) plain names, so
# nothing needs collecting first.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if env_bool("SWITCHYARD_STATIC_MANIFEST", default=False)
        else "whitenoise.storage.CompressedStaticFilesStorage"
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "task-list"
LOGOUT_REDIRECT_URL = "login"

# --- REST API -------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: a refused token is then a 401 with WWW-Authenticate, not a 403.
        "portal.hot.CachedTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "portal.api_errors.exception_handler",
    # Requests per address to the token endpoint, on top of the failed-login lockout.
    "DEFAULT_THROTTLE_RATES": {"auth": env_str("SWITCHYARD_AUTH_RATE", "30/min")},
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchyard API",
    "DESCRIPTION": "Submit and follow HPC, AI training, inference and agent tasks.",
    "VERSION": "1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # Two "state" choice sets: name them, so the schema (and check --deploy) is clean.
    "ENUM_NAME_OVERRIDES": {
        "TaskStateEnum": "scheduling.models.TaskState",
        "WorkflowStateEnum": "scheduling.models.WorkflowState",
    },
}

# secret_env's keys: Fernet keys, the first seals (scheduling/sealed.py; docs/security.md).
SWITCHYARD_SECRETS_KEYS = env_str("SWITCHYARD_SECRETS_KEY") or ""

# --- Celery ---------------------------------------------------------------------------------
REDIS_URL = _redis_url
# A password the project has shipped, or none on another host, is everyone's: refused in
# production settings (config/credentials.py).
if not DEBUG and (_problems := credential_problems(DATABASES["default"], REDIS_URL)):
    raise ImproperlyConfigured("refusing to start: " + "; ".join(_problems))
BROKER_DIR = VAR_DIR / "broker"
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"visibility_timeout": 3600}
else:
    # Serverless default: kombu's filesystem transport, polled fast enough for ~25 ms hops.
    CELERY_BROKER_URL = "sy-filesystem://"  # config/runtime/broker.py: atomic message files
    # kombu does not create its folders; every process (web, worker, tests) may be first.
    for _folder in ("queue", "processed", "control"):
        (BROKER_DIR / _folder).mkdir(parents=True, exist_ok=True)
    if BROKER_DIR.stat().st_uid == os.geteuid():
        BROKER_DIR.chmod(0o700)  # the portal's messages are nobody else's to list
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        # Broadcast exchanges: kombu's default is a "control" folder in the current directory.
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
        "polling_interval": 0.02,
    }
# Periodic work has its own queue, which workers read beside the default one: a burst of
# dispatches must not starve the polls (seen in the benchmark: 90 % of polls expired unrun).
CELERY_TASK_QUEUES: dict[str, dict[str, object]] = {"celery": {}, "periodic": {}}
CELERY_TASK_ROUTES = {
    "scheduling.poll_backends": {"queue": "periodic"},
    "scheduling.sweep_pending": {"queue": "periodic"},
    "scheduling.timers": {"queue": "periodic"},
    "scheduling.housekeeping": {"queue": "periodic"},
    "scheduling.policy_pass": {"queue": "periodic"},
    "scheduling.capacity_pass": {"queue": "periodic"},
    "scheduling.health_pass": {"queue": "periodic"},
}
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Reuse a worker's database connection across tasks (config/celery.py says why and how).
CELERY_DB_REUSE_MAX = 10_000
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", default=False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker restart never stops a worker: it reconnects for as long as it takes (Celery's
# default gives up after 100 tries), and the consumer survives a lost connection that held
# unacknowledged messages (config/celery.py). docs/deployment.md, "Restarts".
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CONSUMER = "config.celery:Consumer"

SWITCHYARD_POLL_SECONDS = float(env_int("SWITCHYARD_POLL_MS", 1000)) / 1000
# A poll message not run within this long is dropped. Generous on purpose: under load polls
# wait behind dispatches, and one dropped after twice the interval (as before) meant a busy
# worker stopped polling at all; the extra ones are skipped cheaply (scheduling/tasks.py).
SWITCHYARD_POLL_EXPIRES_SECONDS = max(SWITCHYARD_POLL_SECONDS * 2, 10.0)
# How long a dispatch waits for the jobs it just submitted to start, so that a local job
# shows `running` at once rather than at the next poll (scheduling/engine/dispatch.py); 0: never.
SWITCHYARD_START_WAIT_SECONDS = env_int("SWITCHYARD_START_WAIT_MS", 50) / 1000
SWITCHYARD_SWEEP_SECONDS = env_int("SWITCHYARD_SWEEP_SECONDS", 15)
# A task still `pending` this long after its last change is dispatched again by the sweep.
SWITCHYARD_PENDING_GRACE_SECONDS = env_int("SWITCHYARD_PENDING_GRACE_SECONDS", 10)
# How long one dispatcher owns a task before another may take it over (worker died mid-way).
SWITCHYARD_DISPATCH_LEASE_SECONDS = env_int("SWITCHYARD_DISPATCH_LEASE_SECONDS", 60)

SWITCHYARD_RETRY_BACKOFF_SECONDS = float(env_int("SWITCHYARD_RETRY_BACKOFF_MS", 1000)) / 1000
SWITCHYARD_RETRY_BACKOFF_MAX_SECONDS = 60.0
SWITCHYARD_TRIGGER_SECONDS = float(env_int("SWITCHYARD_TRIGGER_MS", 2000)) / 1000
# Trigger files must lie under one of these folders (users cannot probe the filesystem).
SWITCHYARD_TRIGGER_ROOTS = env_list("SWITCHYARD_TRIGGER_ROOTS", [str(VAR_DIR / "triggers")])

# --- Capacity (docs/capacity.md) --------------------------------------------------------------
# A lease lasts at most this long (the default site lends inference GPUs for 4 h).
SWITCHYARD_LEASE_MAX_HOURS = env_int("SWITCHYARD_LEASE_MAX_HOURS", 8)
# A waiting task preempts lower-level preemptible work only after waiting this long.
SWITCHYARD_PREEMPT_AFTER_S = env_int("SWITCHYARD_PREEMPT_AFTER_S", 10)
# How often the capacity pass (preemption, leases, start-up timeouts) and the health
# checks run.
SWITCHYARD_CAPACITY_SECONDS = float(env_int("SWITCHYARD_CAPACITY_MS", 5000)) / 1000
SWITCHYARD_HEALTH_SECONDS = float(env_int("SWITCHYARD_HEALTH_MS", 30000)) / 1000

# --- Accounting (docs/accounting.md) --------------------------------------------------------
# The currency of new rates.
SWITCHYARD_CURRENCY = env_str("SWITCHYARD_CURRENCY", "CNY")
# How often ended attempts are metered (the ones the attempt-end hook could not meter yet),
# and how often the backends' accounting is reconciled with the records (and over how long).
SWITCHYARD_METER_SECONDS = float(env_int("SWITCHYARD_METER_MS", 60_000)) / 1000
SWITCHYARD_RECONCILE_SECONDS = float(env_int("SWITCHYARD_RECONCILE_MS", 3_600_000)) / 1000
SWITCHYARD_RECONCILE_WINDOW_HOURS = env_int("SWITCHYARD_RECONCILE_WINDOW_HOURS", 48)
# A record may differ from the backend's own by this fraction before it is a mismatch.
SWITCHYARD_RECONCILE_TOLERANCE = env_str("SWITCHYARD_RECONCILE_TOLERANCE", "0.001")

# --- Policy (docs/policy.md) ----------------------------------------------------------------
# Time-of-day weights are read in the site's time zone.
SWITCHYARD_SITE_TIMEZONE = env_str("SWITCHYARD_SITE_TIMEZONE", "UTC")
# Fair-share usage halves every this many hours.
SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS = env_int("SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS", 7 * 24)
# How often the levels pass runs (levels move, approvals expire, quota-held tasks are
# reconsidered).
SWITCHYARD_POLICY_SECONDS = float(env_int("SWITCHYARD_POLICY_MS", 5000)) / 1000
# Every queue's load is sampled this often, for the dashboards (docs/console.md).
SWITCHYARD_SAMPLE_SECONDS = float(env_int("SWITCHYARD_SAMPLE_MS", 60_000)) / 1000
# A priority-raise request lasts at most this long; a descriptor's `priority: high` asks
# for this long.
SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS = env_int("SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS", 30 * 24)
SWITCHYARD_PRIORITY_REQUEST_DEFAULT_HOURS = env_int("SWITCHYARD_PRIORITY_REQUEST_DEFAULT_HOURS", 24)
# The most priority requests one person may have pending at once (a sweep asks once for its
# project's tasks in a queue, not once per task).
SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING = env_int("SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING", 20)

# --- What-if simulations (docs/simulation.md) ---------------------------------------------
# Traces uploaded on the console's Simulations page, one folder per upload; the largest
# accepted; how often a worker looks for runs no message announced (a broker that was down).
SWITCHYARD_SIMULATION_DIR = Path(env_str("SWITCHYARD_SIMULATION_DIR", str(VAR_DIR / "simulations")))
SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES = env_int(
    "SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES", 20 * 1024 * 1024
)
SWITCHYARD_SIMULATION_SWEEP_SECONDS = env_int("SWITCHYARD_SIMULATION_SWEEP_SECONDS", 60)

# Mail (priority-request decisions): the console in development, SMTP when EMAIL_HOST is set.
EMAIL_HOST = env_str("EMAIL_HOST", "") or ""
EMAIL_BACKEND = (
    "django.core.mail.backends.smtp.EmailBackend"
    if EMAIL_HOST
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", default=False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "switchyard@localhost")
# The portal's address as users reach it, for links in mails.
SWITCHYARD_PUBLIC_URL = env_str("SWITCHYARD_PUBLIC_URL", "http://127.0.0.1:8000")

# One beat sends, however many run: the others wait on its lock (config/runtime/beat.py).
CELERY_BEAT_SCHEDULER = "config.runtime.beat:SingleBeatScheduler"
# Each periodic task: how often it is sent, and how long its message may wait before it is
# dropped (twice the period unless said: the next one is already on its way).
CELERY_BEAT_SCHEDULE = {
    name: {"task": task, "schedule": float(every), "options": {"expires": expires or every * 2}}
    for name, task, every, expires in (
        ("poll-backends", "scheduling.poll_backends", SWITCHYARD_POLL_SECONDS,
         SWITCHYARD_POLL_EXPIRES_SECONDS),
        ("timers", "scheduling.timers", SWITCHYARD_TRIGGER_SECONDS, None),
        ("policy", "scheduling.policy_pass", SWITCHYARD_POLICY_SECONDS, None),
        ("capacity", "scheduling.capacity_pass", SWITCHYARD_CAPACITY_SECONDS, None),
        ("health", "scheduling.health_pass", SWITCHYARD_HEALTH_SECONDS, None),
        ("sweep-pending", "scheduling.sweep_pending", SWITCHYARD_SWEEP_SECONDS, None),
        ("meter", "accounting.meter_pass", SWITCHYARD_METER_SECONDS, None),
        ("reconcile", "accounting.reconcile_pass", SWITCHYARD_RECONCILE_SECONDS, None),
        ("load-sample", "scheduling.load_sample", SWITCHYARD_SAMPLE_SECONDS, None),
        ("simulations", "scheduling.simulations", SWITCHYARD_SIMULATION_SWEEP_SECONDS, None),
        ("housekeeping", "scheduling.housekeeping", 600.0, None),
    )
}  # fmt: skip

# A web process hands a stored task's dispatch to a thread of its own, which sends what has
# gathered as one message (scheduling/outbox.py); off, each request publishes its own.
SWITCHYARD_PUBLISH_IN_BACKGROUND = env_bool("SWITCHYARD_PUBLISH_IN_BACKGROUND", default=True)

# --- Descriptors ----------------------------------------------------------------------------
SWITCHYARD_DESCRIPTOR_MAX_BYTES = env_int("SWITCHYARD_DESCRIPTOR_MAX_BYTES", 256 * 1024)
# POST /api/v1/tasks/batch/: many independent tasks (a parameter sweep) in one request.
SWITCHYARD_BATCH_MAX_TASKS = env_int("SWITCHYARD_BATCH_MAX_TASKS", 10_000)
SWITCHYARD_BATCH_MAX_BYTES = env_int("SWITCHYARD_BATCH_MAX_BYTES", 16 * 1024 * 1024)
# Request bodies (config/middleware.py; the front has the same limits: docker/nginx/): without
# a session or token every path takes at most the first; signed in, the second, or a path's
# own larger limit (a batch, a descriptor, a simulation trace).
SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS = env_int("SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS", 64 * 1024)
SWITCHYARD_BODY_MAX_BYTES = env_int("SWITCHYARD_BODY_MAX_BYTES", 1024 * 1024)

# --- Compute backends, by alias (a pool names one) ----------------------------------------
# Jobs never run as root (docs/security.md): as the researcher's own cluster account where
# one is mapped, else as this unprivileged account (docker/job-accounts.sh creates it).
SWITCHYARD_JOB_ACCOUNT = env_str("SWITCHYARD_JOB_ACCOUNT", "switchyard-job")
# What every local job may use beyond what it asked for.
SWITCHYARD_JOB_MAX_PROCESSES = env_int("SWITCHYARD_JOB_MAX_PROCESSES", 512)
SWITCHYARD_JOB_MAX_OUTPUT_MB = env_int("SWITCHYARD_JOB_MAX_OUTPUT_MB", 64)
SWITCHYARD_JOB_MAX_DISK_MB = env_int("SWITCHYARD_JOB_MAX_DISK_MB", 10 * 1024)
SWITCHYARD_JOB_RETENTION_HOURS = env_int("SWITCHYARD_JOB_RETENTION_HOURS", 7 * 24)
# Ended jobs' folders of one user / one project together: past it the oldest go before their
# retention ends (0: no total).
SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER = env_int("SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER", 50)
SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT = env_int(
    "SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT", 200
)
# Networks no batch job may reach (CIDRs, comma-separated), besides the control plane's own
# addresses, which are always blocked (docs/security.md, "Network").
SWITCHYARD_JOB_BLOCKED_NETWORKS = [str(n) for n in env_networks("SWITCHYARD_JOB_BLOCKED_NETWORKS")]
COMPUTE_BACKENDS: dict[str, dict[str, Any]] = {
    "local": {
        "BACKEND": "scheduling.backends.local.LocalBackend",
        "OPTIONS": {
            "root": env_str("SWITCHYARD_LOCAL_ROOT") or str(VAR_DIR / "local-backend"),
            "bwrap": env_str("SWITCHYARD_BWRAP", "bwrap"),
            "slirp4netns": env_str("SWITCHYARD_SLIRP4NETNS", "slirp4netns"),
            "inventory_ttl_s": 2.0,
            "job_account": SWITCHYARD_JOB_ACCOUNT,
            "max_processes": SWITCHYARD_JOB_MAX_PROCESSES,
            "max_output_bytes": SWITCHYARD_JOB_MAX_OUTPUT_MB << 20,
            "max_disk_bytes": SWITCHYARD_JOB_MAX_DISK_MB << 20,
            "retention_s": SWITCHYARD_JOB_RETENTION_HOURS * 3600,
            "max_folder_bytes_per_user": SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER << 30,
            "max_folder_bytes_per_project": SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT << 30,
            # The node check (docs/capacity.md): the host's load, disk and GPU temperatures,
            # or a site's own function.
            "health_probe": env_str(
                "SWITCHYARD_LOCAL_HEALTH_PROBE", "scheduling.backends.local.health.host_probe"
            ),
        },
    },
}
# The localhost cluster (docker/slurm/cluster.sh) writes its settings to <dir>/env.
SWITCHYARD_SLURM_DIR = env_str("SWITCHYARD_SLURM_DIR", "/var/tmp/switchyard-slurm")
COMPUTE_BACKENDS["slurm"] = {
    "BACKEND": "scheduling.backends.slurm.SlurmBackend",
    "OPTIONS": {
        "cluster": env_str("SWITCHYARD_SLURM_CLUSTER", "switchyard"),
        "slurm_conf": env_str("SLURM_CONF") or f"{SWITCHYARD_SLURM_DIR}/etc/slurm.conf",
        "workdir": env_str("SWITCHYARD_SLURM_WORKDIR") or str(VAR_DIR / "slurm-jobs"),
        "command_timeout_s": float(env_int("SWITCHYARD_SLURM_TIMEOUT_S", 20)),
        "service_account": env_str("SWITCHYARD_SLURM_SERVICE_ACCOUNT") or SWITCHYARD_JOB_ACCOUNT,
        "max_processes": SWITCHYARD_JOB_MAX_PROCESSES,
        "max_file_bytes": SWITCHYARD_JOB_MAX_DISK_MB << 20,
        # sbatch calls a dispatch batch runs at once (docs/slurm.md)
        "submit_concurrency": env_int("SWITCHYARD_SLURM_SUBMIT_CONCURRENCY", 4),
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
