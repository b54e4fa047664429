"""The worker's per-run log lines: the same record as ``Logger.info``, made without walking the stack."""

from __future__ import annotations

import logging

from orchestration import logs

logger = logging.getLogger("orchestration.tests.logs")


def test_info__the_record_logger_info_makes__with_the_callers_file_line_and_function(caplog):
    caplog.set_level(logging.INFO, logger=logger.name)
    logger.info("workflow %s completed in %.3fs", "abc", 0.25)
    logs.info(logger, "workflow %s completed in %.3fs", "abc", 0.25)
    standard, fast = caplog.records
    assert fast.getMessage() == standard.getMessage() == "workflow abc completed in 0.250s"
    assert (fast.pathname, fast.funcName, fast.levelno) == (standard.pathname, standard.funcName, logging.INFO)
    assert fast.lineno == standard.lineno + 1


def test_info__below_the_loggers_level__makes_no_record(caplog):
    caplog.set_level(logging.WARNING, logger=logger.name)
    logs.info(logger, "not %s", "made")
    assert caplog.records == []
