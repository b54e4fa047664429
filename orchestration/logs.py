"""The worker's per-run log lines, made without walking the stack.

``Logger.info`` finds the caller's file and line by walking up the stack past
logging's own frames (``findCaller``, with a path normalisation a frame): a
fifth of what a line costs, and a worker writes two lines a one-step workflow
(docs/performance.md). ``info`` takes them from the caller's frame instead; the
record, its filters, handlers and format are the same.
"""

from __future__ import annotations

import logging
import sys
from typing import Any


def info(logger: logging.Logger, message: str, *args: Any) -> None:
    """``logger.info(message, *args)``, with the caller's file, line and function read from its frame."""
    if logger.isEnabledFor(logging.INFO):
        frame = sys._getframe(1)
        code = frame.f_code
        record = logger.makeRecord(
            logger.name, logging.INFO, code.co_filename, frame.f_lineno, message, args, None, code.co_name
        )
        logger.handle(record)
