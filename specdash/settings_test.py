"""The small override the test suite runs with."""

import os

os.environ.setdefault("SPECDASH_SECRET_KEY", "tests-only-secret-key")

from specdash.env import env_str
from specdash.settings import *  # noqa: F403

# A commit does not wait for its WAL to reach the disk: a crash could lose the last commits of
# a test database, never corrupt it, and `./dev up`'s database keeps fsync and durable commits
# (only connections made with these settings, the suite's and its workers', skip the wait).
DATABASES["default"]["OPTIONS"] = {"options": "-c synchronous_commit=off"}  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}

# A Redis database of its own, so a worker started by "./dev up" never takes test work.
CELERY_BROKER_URL = env_str("SPECDASH_TEST_REDIS_URL", CELERY_BROKER_URL.rsplit("/", 1)[0] + "/1")  # noqa: F405

# Serve static files through the finders, so tests need no collectstatic.
WHITENOISE_AUTOREFRESH = True

# The test client's login() calls authenticate() without a request, which django-axes
# refuses; the login-throttle tests switch it on (tests/test_security.py).
AXES_ENABLED = False
