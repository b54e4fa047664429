import os
import threading
from typing import Any

from django.apps import AppConfig


class ThreadKilled(BaseException):
    """Ends the thread it is raised in: no ``except Exception`` stops it."""


class TestAppConfig(AppConfig):
    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Fault injection for worker subprocesses: the thread named by
        # TESTAPP_KILL_THREAD dies as it opens its database connection.
        doomed = os.environ.get("TESTAPP_KILL_THREAD")
        if doomed:
            from django.db.backends.signals import connection_created

            def kill(**kwargs: Any) -> None:
                if threading.current_thread().name == doomed:
                    raise ThreadKilled(f"fault injection: TESTAPP_KILL_THREAD={doomed}")

            connection_created.connect(kill, weak=False)
