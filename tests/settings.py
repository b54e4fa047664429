"""Test settings: the example project plus a test app of instrumented workflows.

Worker subprocesses started by the tests use these settings too, with
DATABASE_NAME pointing them at the test database.
"""

import importlib.util
import os

from project.settings import *  # noqa: F403
from project.settings import DATABASES, INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp"]


def _setting(name: str, default: float) -> float:
    """Fast defaults for tests; worker subprocesses can be given others by environment."""
    return float(os.environ.get(f"ORCHESTRATION_{name}", default))


ORCHESTRATION = {
    "RETRY_BACKOFF": _setting("RETRY_BACKOFF", 0.05),
    "RETRY_BACKOFF_MAX": _setting("RETRY_BACKOFF_MAX", 0.2),
    "POLL_INTERVAL": _setting("POLL_INTERVAL", 0.2),
    "HEARTBEAT_INTERVAL": _setting("HEARTBEAT_INTERVAL", 1),
    "STUCK_AFTER": _setting("STUCK_AFTER", 30),
    "SHUTDOWN_GRACE": _setting("SHUTDOWN_GRACE", 10),
    "MAX_WORKER_DEATHS": int(_setting("MAX_WORKER_DEATHS", 3)),
    # 0: the process's --concurrency.
    "MAX_ABANDONED_BODIES": int(_setting("MAX_ABANDONED_BODIES", 0)) or None,
    # The test app has an every-2-seconds schedule: only the schedule tests turn it on.
    "SCHEDULER": bool(_setting("SCHEDULER", 0)),
}
if importlib.util.find_spec("django.tasks") is not None:  # Django >= 6.0
    TASKS = {
        "default": {"BACKEND": "orchestration.tasks.WorkflowBackend", "QUEUES": ["default", "emails"]},
        "no_retries": {"BACKEND": "orchestration.tasks.WorkflowBackend", "OPTIONS": {"MAX_RETRIES": 0}},
    }

#: What the tests' scrapes of /metrics/ send (``tests.support.METRICS_AUTH``).
METRICS_TOKEN = "test-metrics-token"

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Several test runs can share one server when each names its own test database.
if os.environ.get("TEST_DATABASE_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": os.environ["TEST_DATABASE_NAME"]}

# A second alias, with a test database of its own, for the tests of ORCHESTRATION["DATABASE"].
_default_test_name = DATABASES["default"].get("TEST", {}).get("NAME") or f"test_{DATABASES['default']['NAME']}"
DATABASES["queue"] = {**DATABASES["default"], "TEST": {"NAME": f"{_default_test_name}_queue"}}
