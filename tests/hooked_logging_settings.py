"""The test settings of a project that logs to the console through ``LOGGING``
and whose error tracker hooks ``Logger.callHandlers``, as Sentry's logging
integration does: every record the hook sees is appended, one line each, to
the file named by ``HOOKED_RECORDS``."""

import logging
import os

from tests.settings import *  # noqa: F403

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}

_call_handlers = logging.Logger.callHandlers


def _seen(self: logging.Logger, record: logging.LogRecord) -> None:
    with open(os.environ["HOOKED_RECORDS"], "a", encoding="utf-8") as seen:
        seen.write(f"{record.levelname} {record.name} {record.threadName}: {record.getMessage()}\n")
    _call_handlers(self, record)


logging.Logger.callHandlers = _seen  # type: ignore[method-assign]
