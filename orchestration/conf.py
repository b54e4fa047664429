"""Settings, read lazily from ``settings.ORCHESTRATION`` on first access.

Each value is read on its first access (not at import) and kept: the worker
reads some on every step. ``override_settings`` (and pytest-django's
``settings``) announce a change with ``setting_changed``, which drops the kept
values.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed

DEFAULTS: dict[str, Any] = {
    "STUCK_AFTER": 300,
    "HEARTBEAT_INTERVAL": 30,
    "DEFAULT_MAX_RETRIES": 3,
    "RETRY_BACKOFF": 1,
    "RETRY_BACKOFF_MAX": 600,
    "POLL_INTERVAL": 1.0,
    "SHUTDOWN_GRACE": 30,
    "DATABASE": "default",
    "CONCURRENCY": 4,
    # Async runs a process holds at once in its shared event loop, apart from
    # its threads (see worker.loop); 0: each async run holds a thread.
    "ASYNC_CONCURRENCY": 100,
    # Runs a process keeps claimed ahead of its threads while its runs are
    # short (see worker.dispatch); None: as many as its threads finish in
    # about 50 ms, one to four a thread; 0: never.
    "CLAIM_AHEAD": None,
    # Queue names workers may serve besides those of registered workflows
    # (for rows enqueued by plain SQL or other languages).
    "QUEUES": [],
    # Whether runworkers processes start the runs of schedules (the admin's and ``@workflow(schedule=...)``).
    "SCHEDULER": True,
    # Largest accepted JSON encoding of a workflow's input or a step's output.
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    # A workflow whose worker died this many times in a row at the same step
    # is parked as failed instead of being reclaimed again.
    "MAX_WORKER_DEATHS": 3,
    # Abandoned step bodies (past their timeout, still running) a runworkers
    # process may hold before it restarts itself; None: its --concurrency.
    "MAX_ABANDONED_BODIES": None,
}


class OrchestrationSettings:
    def __getattr__(self, name: str) -> Any:
        """A value not read yet (kept, so that the next read finds it without this call)."""
        if name not in DEFAULTS:
            raise AttributeError(f"unknown orchestration setting {name!r}")
        user_settings = getattr(django_settings, "ORCHESTRATION", None) or {}
        value = self.__dict__[name] = user_settings.get(name, DEFAULTS[name])
        return value

    def reload(self) -> None:
        """Forget the values read: the next access reads ``settings.ORCHESTRATION`` again."""
        self.__dict__.clear()

    def user_keys(self) -> set[str]:
        return set((getattr(django_settings, "ORCHESTRATION", None) or {}).keys())


conf = OrchestrationSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "ORCHESTRATION":
        conf.reload()


setting_changed.connect(_reload)
