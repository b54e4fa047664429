"""Test settings: the example project plus a test app of instrumented workflows.

Worker subprocesses started by the tests use these settings too, with
DATABASE_NAME pointing them at the test database.
"""

import os

from project.settings import *  # noqa: F403
from project.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]

ORCHESTRATION = {
    "RETRY_BACKOFF": 0.05,
    "RETRY_BACKOFF_MAX": 0.2,
    "POLL_INTERVAL": 0.2,
    "HEARTBEAT_INTERVAL": 1,
    "STUCK_AFTER": 30,
    "SHUTDOWN_GRACE": 10,
}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Several test runs can share one server when each names its own test database.
if os.environ.get("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["TEST_DATABASE_NAME"]}
