"""specdash settings, read from SPECDASH_* environment variables (see README)."""

from datetime import timedelta
from pathlib import Path

from specdash.env import env_bool, env_float, env_int, env_list, env_seconds_by_name, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(env_str("SPECDASH_DATA_DIR", str(BASE_DIR / ".specdash")))

SECRET_KEY = env_str("SPECDASH_SECRET_KEY")
DEBUG = env_bool("SPECDASH_DEBUG", False)
ALLOWED_HOSTS = env_list("SPECDASH_ALLOWED_HOSTS", ["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env_list("SPECDASH_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "axes",
    "csp",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "experiments",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "specdash.middleware.HtmxLoginRedirectMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "specdash.urls"
WSGI_APPLICATION = "specdash.wsgi.application"

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
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "HOST": env_str("SPECDASH_DB_HOST", "127.0.0.1"),
        "PORT": env_int("SPECDASH_DB_PORT", 54329),
        "NAME": env_str("SPECDASH_DB_NAME", "specdash"),
        "USER": env_str("SPECDASH_DB_USER", "specdash"),
        "PASSWORD": env_str("SPECDASH_DB_PASSWORD", ""),
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes before the model backend: it refuses a locked-out username from that address
# before the (deliberately slow) password hash is computed.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "experiments:list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = True
# A refused CSRF check says why, as every other refusal does (JSON under /api/).
CSRF_FAILURE_VIEW = "specdash.views.csrf_failure"
X_FRAME_OPTIONS = "DENY"

# HTTPS: one switch for an installation served over TLS, each setting overridable.
# Behind a TLS-terminating proxy, SPECDASH_BEHIND_PROXY trusts its X-Forwarded-Proto and
# X-Forwarded-For (the login throttle then counts the client's address, not the proxy's).
HTTPS = env_bool("SPECDASH_HTTPS", False)
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env_bool("SPECDASH_SECURE_COOKIES", HTTPS)
SECURE_SSL_REDIRECT = env_bool("SPECDASH_SSL_REDIRECT", HTTPS)
SECURE_HSTS_SECONDS = env_int("SPECDASH_HSTS_SECONDS", 365 * 24 * 3600 if HTTPS else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SPECDASH_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = env_bool("SPECDASH_HSTS_PRELOAD", False)
BEHIND_PROXY = env_bool("SPECDASH_BEHIND_PROXY", False)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if BEHIND_PROXY else None

# Bodies larger than this are refused with a page that says so (specdash/views.py).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("SPECDASH_MAX_BODY_BYTES", 1024 * 1024)

# Login throttling (django-axes): after this many wrong passwords for one username from one
# address, that pair is refused (HTTP 429, before any password hash) until the cool-off ends.
AXES_FAILURE_LIMIT = env_int("SPECDASH_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("SPECDASH_LOGIN_COOLOFF_MIN", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_IPWARE_PROXY_COUNT = 1 if BEHIND_PROXY else None
AXES_IPWARE_META_PRECEDENCE_ORDER = ["HTTP_X_FORWARDED_FOR", "REMOTE_ADDR"] if BEHIND_PROXY else ["REMOTE_ADDR"]

# Content-Security-Policy (django-csp): scripts, styles and data from this origin only. The
# experiment page's arm swatches carry their colour in a style attribute: that view allows
# exactly those values by hash (experiments/results/views.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "font-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'none'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# The REST API (experiments/api/): a per-user token (or the session of a logged-in page),
# JSON only, the OpenAPI schema generated by drf-spectacular and served at /api/schema/.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["experiments.api.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "experiments.api.exceptions.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "specdash API",
    "DESCRIPTION": "Submit, follow, cancel and read speculative-decoding experiments. "
    "Authenticate with the header `Authorization: Token <key>` (your token: /api/token/).",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "ENUM_NAME_OVERRIDES": {
        "ExperimentStatusEnum": "experiments.models.Experiment.Status",
        "RunStatusEnum": "experiments.models.Run.Status",
    },
}

# Celery: Redis broker, one run at a time per worker process, work acknowledged only
# once done so a killed worker's experiment is delivered again.
CELERY_BROKER_URL = env_str("SPECDASH_REDIS_URL", "redis://127.0.0.1:63799/0")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "cpu"
# An experiment's task holds its message unacknowledged until it ends; Redis hands it out
# again after this long. The experiment form refuses an experiment whose time limit
# (experiments/measurement/planning/limits.py) is longer, so a live task is never delivered twice.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("SPECDASH_VISIBILITY_TIMEOUT_S", 24 * 3600)}
# Submitting while Redis is down: a few quick tries, then the experiment waits, saved, for
# the periodic dispatcher (experiments/execution/dispatch.py) instead of holding the page.
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 0.5}
CELERY_BROKER_CONNECTION_TIMEOUT = 2.0
# The reaper and the dispatcher have a queue and a worker process of their own (./dev).
CELERY_TASK_ROUTES = {
    "workers.tasks.runs_reap_stale": {"queue": "control"},
    "workers.tasks.experiments_dispatch_waiting": {"queue": "control"},
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True

# Which queues have live workers (experiments/execution/worker_queues.py) is kept a few seconds per web
# process: a few seconds' staleness is harmless there, and a process-local cache still works
# while Redis is down, which is when the form must say it cannot tell.
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Workers: where the vLLM runtime lives and how long a run may take.
SPECDASH_VLLM_PYTHON = env_str("SPECDASH_VLLM_PYTHON", str(BASE_DIR / ".venv-vllm" / "bin" / "python"))
SPECDASH_MODELS_DIR = Path(env_str("SPECDASH_MODELS_DIR", str(DATA_DIR / "models")))
# How long a vLLM server may take to become healthy, by worker queue, with a default for
# queues not named (experiments/execution/worker_queues.server_start_timeout_s). A GPU start
# includes weight loading, torch.compile, warm-up and CUDA graph capture: minutes for a real
# model, so GPU pools name theirs (for example h100=1800).
SPECDASH_SERVER_START_TIMEOUT_S = env_float("SPECDASH_SERVER_START_TIMEOUT_S", 300.0)
SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE = env_seconds_by_name("SPECDASH_SERVER_START_TIMEOUT_S_BY_QUEUE")
# How long the first server waits for the later servers' models to download
# (workers/server/model_prefetch.py): a download of a real model is not a server start.
SPECDASH_MODEL_PREFETCH_TIMEOUT_S = env_float("SPECDASH_MODEL_PREFETCH_TIMEOUT_S", 3600.0)
# A run's time limit allows this long per generated token (experiments/measurement/planning/limits.py): the
# default is generous for a CPU host; a GPU pool names its own pace, by worker queue (for example h100=0.05),
# so that its experiments are not priced at CPU pace (experiments/execution/worker_queues.seconds_per_token).
SPECDASH_RUN_SECONDS_PER_TOKEN = env_float("SPECDASH_RUN_SECONDS_PER_TOKEN", 0.25)
SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE = env_seconds_by_name("SPECDASH_RUN_SECONDS_PER_TOKEN_BY_QUEUE")
# A worker process beats every second; one silent this long is dead (workers/liveness.py).
SPECDASH_HEARTBEAT_STALE_S = env_int("SPECDASH_HEARTBEAT_STALE_S", 30)
# How long a worker keeps retrying to store a finished run while PostgreSQL does not answer;
# after that the results stay in its spool for the next task (workers/storage/spool.py).
SPECDASH_DB_OUTAGE_WAIT_S = env_float("SPECDASH_DB_OUTAGE_WAIT_S", 600.0)
# The KV cache of CPU servers in GiB; a fraction gives a cache small enough to fill (a test
# of preemption, or the memory a production host would leave).
SPECDASH_CPU_KVCACHE_GIB = env_float("SPECDASH_CPU_KVCACHE_GIB", 2.0)
# CPU servers fork their engine process rather than spawn it: it inherits the vLLM its parent
# imported instead of importing it again, which took about 40 % off a server's start here
# (docs/benchmarks.md; vLLM's CPU platform still spawns its model worker). vLLM's server
# spawns by default for CUDA's sake; GPU hosts keep that. Serving is the same once it is up.
SPECDASH_CPU_FORK_ENGINE = env_bool("SPECDASH_CPU_FORK_ENGINE", True)
# Model ids or paths outside SPECDASH_MODELS_DIR only when an administrator allows them for
# this installation. vLLM never gets --trust-remote-code: no model code from a repository runs.
SPECDASH_ALLOW_ANY_MODEL_PATH = env_bool("SPECDASH_ALLOW_ANY_MODEL_PATH", False)

# Every 10 s: with the 30 s beat limit, a dead worker's run is queued again within 40 s.
CELERY_BEAT_SCHEDULE = {
    "reap-stale-runs": {"task": "workers.tasks.runs_reap_stale", "schedule": 10.0},
    "dispatch-waiting-experiments": {"task": "workers.tasks.experiments_dispatch_waiting", "schedule": 10.0},
}

# Errors and Django's security messages (bad Host, oversized body) go to stderr and to a
# file under the data folder, from the web server and the workers alike.
LOG_DIR = Path(env_str("SPECDASH_LOG_DIR", str(DATA_DIR / "log")))
LOG_DIR.mkdir(parents=True, exist_ok=True)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "errors_file": {
            "class": "logging.handlers.WatchedFileHandler",
            "filename": str(LOG_DIR / "errors.log"),
            "level": "WARNING",
            "formatter": "plain",
        },
    },
    "root": {"handlers": ["console", "errors_file"], "level": env_str("SPECDASH_LOG_LEVEL", "INFO")},
}
