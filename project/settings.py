"""Settings of the example project, read from the environment with django-environ.

DATABASE_URL  postgres://user:password@host:5432/name; unset: embedded PostgreSQL in .pgdata/
SECRET_KEY    unset: a key generated for this checkout, kept in .pgdata/secret_key
DEBUG         off unless set (make serve turns it on)
METRICS_TOKEN the bearer token that reads /metrics/ (unset: staff users only)
"""

from __future__ import annotations

import importlib.util
import os
import secrets
from pathlib import Path
from urllib.parse import unquote

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(DEBUG=(bool, False))
environ.Env.read_env(BASE_DIR / ".env") if (BASE_DIR / ".env").exists() else None
DATA_DIR = BASE_DIR / ".pgdata"  # ignored by git: the embedded database, this checkout's secret key


def _checkout_secret_key() -> str:
    """A key made for this checkout on first use (mode 0600), never one written in the code."""
    path = DATA_DIR / "secret_key"
    DATA_DIR.mkdir(mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_urlsafe(50))
    return path.read_text().strip()


DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY", default=None) or _checkout_secret_key()
#: The bearer token a Prometheus sends for /metrics/ (unset: staff users only).
METRICS_TOKEN = env("METRICS_TOKEN", default="")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "orchestration",
    "project.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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

if env("DATABASE_URL", default=None):
    DATABASES = {"default": env.db("DATABASE_URL")}
    # A Unix-socket directory arrives percent-encoded: postgres://user@%2Fvar%2Frun%2Fpostgresql/db
    DATABASES["default"]["HOST"] = unquote(str(DATABASES["default"].get("HOST", "")))
else:
    from project.embedded_db import embedded_database

    DATABASES = {"default": embedded_database(DATA_DIR)}
#: Only the embedded database, private to this checkout, gets `make demo`'s user demo/demo.
EMBEDDED_DATABASE = not env("DATABASE_URL", default=None)
# Lets test runs point worker subprocesses at the test database.
if os.environ.get("DATABASE_NAME"):
    DATABASES["default"]["NAME"] = os.environ["DATABASE_NAME"]
# Server-side prepared statements: the workers' hot statements are then neither parsed nor planned again.
# Behind PgBouncer in transaction mode (before 1.21) set DATABASE_PREPARE_THRESHOLD= (empty) to turn them off.
_prepare_threshold = env("DATABASE_PREPARE_THRESHOLD", default="5")
DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = int(_prepare_threshold or 0) or None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"

# Django >= 6.0: @task functions (django.tasks) run by runworkers like workflows.
if importlib.util.find_spec("django.tasks") is not None:
    TASKS = {"default": {"BACKEND": "orchestration.tasks.WorkflowBackend"}}

ORCHESTRATION = {
    "RETRY_BACKOFF": env.float("ORCHESTRATION_RETRY_BACKOFF", default=1.0),
    "RETRY_BACKOFF_MAX": env.float("ORCHESTRATION_RETRY_BACKOFF_MAX", default=600.0),
    "STUCK_AFTER": env.float("ORCHESTRATION_STUCK_AFTER", default=300.0),
    "HEARTBEAT_INTERVAL": env.float("ORCHESTRATION_HEARTBEAT_INTERVAL", default=30.0),
    "SHUTDOWN_GRACE": env.float("ORCHESTRATION_SHUTDOWN_GRACE", default=30.0),
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {"orchestration": {"handlers": ["console"], "level": env("ORCHESTRATION_LOG_LEVEL", default="INFO")}},
}
