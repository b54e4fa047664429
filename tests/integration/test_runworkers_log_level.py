"""``runworkers``' log level: the one ``--log-level`` asks for, else the one the
project's ``LOGGING`` gives the ``orchestration`` logger, else INFO."""

from __future__ import annotations

import logging

import pytest
from django.core.management import call_command

from tests.support import RecordingHandler

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def package_logger():
    """The ``orchestration`` logger, with a recording handler; its level restored after."""
    logger = logging.getLogger("orchestration")
    level, handler = logger.level, RecordingHandler()
    logger.addHandler(handler)
    try:
        yield logger, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def levels_logged(handler: RecordingHandler) -> set[str]:
    return {record.levelname for record in handler.records}


def run_once(*options: str) -> None:
    call_command("runworkers", "--burst", "--no-listen", *options)


def test_runworkers__keeps_the_level_logging_gave_the_orchestration_logger(package_logger):
    logger, handler = package_logger
    logger.setLevel(logging.WARNING)
    run_once()
    assert "INFO" not in levels_logged(handler)  # not even the "starting" and "stopped" lines
    assert logger.level == logging.WARNING


def test_runworkers__log_level__overrides_the_level_logging_gave(package_logger):
    logger, handler = package_logger
    logger.setLevel(logging.WARNING)
    run_once("--log-level", "INFO")
    assert "INFO" in levels_logged(handler)


def test_runworkers__with_no_level_from_logging__logs_at_info(package_logger):
    logger, handler = package_logger
    logger.setLevel(logging.NOTSET)
    run_once()
    assert "INFO" in levels_logged(handler)
    assert logger.level == logging.INFO
