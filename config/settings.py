"""Switchyard settings.

Defaults run with no server at all: SQLite, Celery on kombu's filesystem transport, the local
backend. `DATABASE_URL` switches to PostgreSQL, `REDIS_URL` to a Redis broker.

Django reads its settings from this one module. Each setting sits beside the reason for its
default, here or in the module it is imported from by name: config/settings_engine.py (the
engine's passes, capacity, accounting, the policy, what-if runs) and
config/settings_backends.py (the compute backends and what a job may use); config/paths.py
places the var folder.
"""

from __future__ import annotations

import os
from datetime import timedelta

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.content_security import CONTENT_SECURITY_POLICY  # noqa: F401 - a setting
from config.credentials import credential_problems, with_password
from config.env import env_bool, env_int, env_list, env_networks, env_str
from config.paths import BASE_DIR, VAR_DIR
from config.settings_auth import (  # noqa: F401 - settings, each read by name
    OTP_TOTP_ISSUER,
    SWITCHYARD_2FA_RECOVERY_CODES,
    SWITCHYARD_2FA_REQUIRED_ROLES,
    SWITCHYARD_GROUP_MAP,
    SWITCHYARD_LOGIN_BACKENDS,
    SWITCHYARD_OIDC,
    library_settings,
)
from config.settings_backends import (  # noqa: F401 - settings, each read by name
    COMPUTE_BACKENDS,
    SWITCHYARD_IMAGE_CACHE_MAX_MB,
    SWITCHYARD_IMAGE_MAX_PULL_MB,
    SWITCHYARD_IMAGE_MAX_PULLS,
    SWITCHYARD_IMAGE_MAX_UNPACKED_MB,
    SWITCHYARD_IMAGE_PULL_TIMEOUT_S,
    SWITCHYARD_IMAGE_REGISTRIES,
    SWITCHYARD_IMAGE_REGISTRY,
    SWITCHYARD_IMAGE_RESOLVE_TIMEOUT_S,
    SWITCHYARD_IMAGE_SUBMIT_DEADLINE_S,
    SWITCHYARD_IMAGE_TAG_CACHE_S,
    SWITCHYARD_JOB_ACCOUNT,
    SWITCHYARD_JOB_BLOCKED_NETWORKS,
    SWITCHYARD_JOB_CGROUP,
    SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_PROJECT,
    SWITCHYARD_JOB_FOLDERS_MAX_GB_PER_USER,
    SWITCHYARD_JOB_MAX_DISK_MB,
    SWITCHYARD_JOB_MAX_OUTPUT_MB,
    SWITCHYARD_JOB_MAX_PROCESSES,
    SWITCHYARD_JOB_RETENTION_HOURS,
    SWITCHYARD_LEASE_PREPULL_TIMEOUT_S,
    SWITCHYARD_PREPULL_SECONDS,
    SWITCHYARD_SLURM_DIR,
)
from config.settings_engine import (  # noqa: F401 - settings, each read by name
    CELERY_BEAT_SCHEDULE,
    CELERY_BEAT_SCHEDULER,
    SWITCHYARD_CAPACITY_SECONDS,
    SWITCHYARD_CURRENCY,
    SWITCHYARD_DEMO_STORAGE_DIR,
    SWITCHYARD_DISPATCH_LEASE_SECONDS,
    SWITCHYARD_FAIRSHARE_HALF_LIFE_HOURS,
    SWITCHYARD_FILES_HELPER_PYTHON,
    SWITCHYARD_FILES_UPLOAD_MAX_BYTES,
    SWITCHYARD_HEALTH_SECONDS,
    SWITCHYARD_LEASE_MAX_HOURS,
    SWITCHYARD_METER_SECONDS,
    SWITCHYARD_PENDING_GRACE_SECONDS,
    SWITCHYARD_POLICY_SECONDS,
    SWITCHYARD_POLL_EXPIRES_SECONDS,
    SWITCHYARD_POLL_SECONDS,
    SWITCHYARD_PREEMPT_AFTER_S,
    SWITCHYARD_PRIORITY_REQUEST_DEFAULT_HOURS,
    SWITCHYARD_PRIORITY_REQUEST_MAX_HOURS,
    SWITCHYARD_PRIORITY_REQUEST_MAX_PENDING,
    SWITCHYARD_PUBLISH_IN_BACKGROUND,
    SWITCHYARD_RECONCILE_SECONDS,
    SWITCHYARD_RECONCILE_TOLERANCE,
    SWITCHYARD_RECONCILE_WINDOW_HOURS,
    SWITCHYARD_RETRY_BACKOFF_MAX_SECONDS,
    SWITCHYARD_RETRY_BACKOFF_SECONDS,
    SWITCHYARD_SAMPLE_SECONDS,
    SWITCHYARD_SIMULATION_DIR,
    SWITCHYARD_SIMULATION_SWEEP_SECONDS,
    SWITCHYARD_SIMULATION_UPLOAD_MAX_BYTES,
    SWITCHYARD_SITE_TIMEZONE,
    SWITCHYARD_START_WAIT_SECONDS,
    SWITCHYARD_STORAGE_HOUSEKEEPING_SECONDS,
    SWITCHYARD_SWEEP_SECONDS,
    SWITCHYARD_TRIGGER_ROOTS,
    SWITCHYARD_TRIGGER_SECONDS,
    SWITCHYARD_WARM_POOL_SECONDS,
)
from config.settings_logs import (  # noqa: F401 - settings, each read by name
    LOGGING,
    SWITCHYARD_ADMIN_ALLOW,
    SWITCHYARD_ADMIN_PATHS,
    SWITCHYARD_LOG_FORMAT,
)
from config.settings_metrics import (  # noqa: F401 - settings, each read by name
    SWITCHYARD_METRICS,
    SWITCHYARD_METRICS_ALLOW,
    SWITCHYARD_METRICS_DIR,
    SWITCHYARD_METRICS_TOKEN,
)

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
    "django_otp",  # two-factor: authenticator apps and recovery codes (docs/security.md)
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "portal",
    "scheduling",
    "accounting",
    "simulation",
    "config.runtime",
]

MIDDLEWARE = [
    # First: forwarding headers count only from a trusted proxy (docs/security.md).
    "config.proxies.ForwardingHeaders",
    # The request's log context and X-Request-ID; the request being served, for the audit
    # log (docs/operations.md, "Logs").
    "config.logcontext.RequestLog",
    # The admin pages answer only allowed addresses (docs/security.md, "Address allow-lists").
    "config.allowlist.AdminAllowList",
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
    # Whether this session gave its second factor; until it has, only that step (portal/twofactor.py).
    "django_otp.middleware.OTPMiddleware",
    "portal.twofactor.TwoFactorGate",
    # A body over its path's limit is refused before the CSRF check or a view reads it.
    "config.middleware.BodyLimit",
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
    *SWITCHYARD_LOGIN_BACKENDS,  # LDAP and OIDC, when configured (config/settings_auth.py)
    "django.contrib.auth.backends.ModelBackend",
]
globals().update(library_settings())  # django-auth-ldap's and mozilla-django-oidc's own
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


STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
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
LOGIN_REDIRECT_URL = "home"  # each role's own page (portal.roles.home)
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
    # Live sandboxes, per user (docs/sandboxes.md): execs and files, and creates. Per second:
    # DRF keeps every request's time within the window in the cache, read and written whole
    # on each request, so 12000/min would move a list of up to 12,000 times per exec.
    "DEFAULT_THROTTLE_RATES": {
        "auth": env_str("SWITCHYARD_AUTH_RATE", "30/min"),
        "sandbox": env_str("SWITCHYARD_SANDBOX_RATE", "200/s"),
        "sandbox-create": env_str("SWITCHYARD_SANDBOX_CREATE_RATE", "10/s"),
        "preview": env_str("SWITCHYARD_PREVIEW_RATE", "5/s"),  # per user (docs/api.md)
    },
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

# --- Descriptors ----------------------------------------------------------------------------
SWITCHYARD_DESCRIPTOR_MAX_BYTES = env_int("SWITCHYARD_DESCRIPTOR_MAX_BYTES", 256 * 1024)
# POST /api/v1/tasks/batch/: many independent tasks (a parameter sweep) in one request.
SWITCHYARD_BATCH_MAX_TASKS = env_int("SWITCHYARD_BATCH_MAX_TASKS", 10_000)
SWITCHYARD_BATCH_MAX_BYTES = env_int("SWITCHYARD_BATCH_MAX_BYTES", 16 * 1024 * 1024)
# --- Live sandboxes (docs/sandboxes.md) -------------------------------------------------------
# The portal's address as a batch task with `sandboxes: true` reaches it (SWITCHYARD_URL in its
# environment): through the relay its sandbox has, else the portal's public address.
SWITCHYARD_SANDBOX_API_URL = env_str("SWITCHYARD_SANDBOX_API_URL", "") or SWITCHYARD_PUBLIC_URL
# The portal's web server as this machine reaches it (host:port, plain HTTP): where the local
# backend's relay takes a batch task's sandbox-API requests (docs/sandbox-network.md).
# `manage.py up` sets it for its worker from its own --addr.
SWITCHYARD_WEB_ADDR = env_str("SWITCHYARD_WEB_ADDR", "") or "127.0.0.1:8000"
if not SWITCHYARD_WEB_ADDR.rpartition(":")[2].isdigit() or ":" not in SWITCHYARD_WEB_ADDR:
    raise ImproperlyConfigured(
        f"SWITCHYARD_WEB_ADDR: expected host:port, e.g. 127.0.0.1:8000, got {SWITCHYARD_WEB_ADDR!r}"
    )
# How long a create waits for its sandbox to start where the backend shows starts (local).
SWITCHYARD_SANDBOX_START_WAIT_SECONDS = env_int("SWITCHYARD_SANDBOX_START_WAIT_MS", 5000) / 1000
# A file written or read through the API, an exec's stdin (within the body limit below).
SWITCHYARD_SANDBOX_FILE_MAX_BYTES = env_int("SWITCHYARD_SANDBOX_FILE_MAX_BYTES", 1000 * 1000)
# An exec's stdout and stderr, each; past it the output is cut (`truncated`).
SWITCHYARD_SANDBOX_OUTPUT_MAX_BYTES = env_int("SWITCHYARD_SANDBOX_OUTPUT_MAX_BYTES", 1 << 20)
# Sandbox calls (exec, files) one user may have in flight in one web process; past it a 429.
# A call holds its web thread until the sandbox answers: below the threads of a process
# (4, config/runtime/serve.py), so one user's slow execs leave the others a thread.
SWITCHYARD_SANDBOX_CALLS_PER_USER = env_int("SWITCHYARD_SANDBOX_CALLS_PER_USER", 3)
# Request bodies (config/middleware.py; the front has the same limits: docker/nginx/): without
# a session or token every path takes at most the first; signed in, the second, or a path's
# own larger limit (a batch, a descriptor, a simulation trace).
SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS = env_int("SWITCHYARD_BODY_MAX_BYTES_ANONYMOUS", 64 * 1024)
SWITCHYARD_BODY_MAX_BYTES = env_int("SWITCHYARD_BODY_MAX_BYTES", 1024 * 1024)

from config.settings_gpu import (  # noqa: E402, F401 - settings, each read by name
    SWITCHYARD_GPU_HEALTH,
    SWITCHYARD_GPU_SAMPLE_S,
)
