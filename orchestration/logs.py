"""The log lines about runs: made without walking the stack, and written, in a
worker process, by one thread.

``Logger.info`` finds the caller's file and line by walking up the stack past
logging's own frames (``findCaller``, with a path normalisation a frame): a
fifth of what a line costs. ``RunLogger`` takes them from the caller's frame
instead; the record, its filters, handlers and format are the same.

A handler holds a lock while it formats and writes a record. Threads that log
at once queue on it, and as each waits for the GIL besides, the queue, once
formed, keeps forming: a line costs two to three times its single-threaded
price in a worker of 4 threads (docs/performance.md). So while a worker runs
(``writing``), its threads only make the records, and one thread hands them to
the handlers, in the order they were made, within ``WRITE_EVERY`` seconds.
The record is made in the thread that logs: its time, thread name and
exception are the caller's.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from typing import Any

#: How long the writer lets lines gather before it writes them.
WRITE_EVERY = 0.005
#: Lines waiting beyond which the thread that logs writes them itself: a sink
#: slower than the lines come slows the workers, as without the writer.
MOST_WAITING = 10_000


class RunLogger:
    """A logger of the lines about runs (a subset of ``logging.Logger``'s
    interface): the records are ``Logger``'s, made from the caller's frame and
    written by the process's ``LineWriter`` while one runs."""

    def __init__(self, name: str) -> None:
        self.logger = logging.getLogger(name)

    def info(self, message: str, *args: Any) -> None:
        self._log(logging.INFO, message, args)

    def warning(self, message: str, *args: Any) -> None:
        self._log(logging.WARNING, message, args)

    def error(self, message: str, *args: Any) -> None:
        self._log(logging.ERROR, message, args)

    def exception(self, message: str, *args: Any) -> None:
        """An ERROR line with the exception being handled."""
        self._log(logging.ERROR, message, args, sys.exc_info())

    def _log(self, level: int, message: str, args: tuple[Any, ...], exc_info: Any = None) -> None:
        logger = self.logger
        if not logger.isEnabledFor(level):
            return
        frame = sys._getframe(2)
        code = frame.f_code
        record = logger.makeRecord(
            logger.name, level, code.co_filename, frame.f_lineno, message, args, exc_info, code.co_name
        )
        writer = _writer
        if writer is None:
            logger.handle(record)
        else:
            writer.put(logger, record)


class LineWriter:
    """The thread that hands a worker process's run lines to their handlers."""

    def __init__(self) -> None:
        self._lines: collections.deque[tuple[logging.Logger, logging.LogRecord]] = collections.deque()
        self._pending = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="orchestration-log-writer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def put(self, logger: logging.Logger, record: logging.LogRecord) -> None:
        self._lines.append((logger, record))
        if self._closed or len(self._lines) > MOST_WAITING:  # the writer stopped, or is behind
            self._write()
        elif not self._pending.is_set():
            self._pending.set()

    def close(self) -> None:
        """Write what is left, and stop."""
        self._closed = True
        self._pending.set()
        self._thread.join()
        self._write()

    def _run(self) -> None:
        while not self._closed:
            self._pending.wait()
            time.sleep(WRITE_EVERY)  # lines made meanwhile are written together
            self._pending.clear()
            self._write()

    def _write(self) -> None:
        lines = self._lines
        while lines:
            try:
                logger, record = lines.popleft()
            except IndexError:  # another thread wrote the last one
                return
            try:
                logger.handle(record)
            except Exception:  # a filter's error: the writer must go on for the other lines
                if logging.raiseExceptions:
                    traceback.print_exc(file=sys.stderr)


_writer: LineWriter | None = None
_writers = 0
_writer_lock = threading.Lock()


def _forked() -> None:
    """In a child forked by a step, which has none of its parent's threads: lines are handled at once."""
    global _writer, _writers, _writer_lock
    _writer, _writers, _writer_lock = None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forked)


@contextlib.contextmanager
def writing() -> Iterator[None]:
    """While in it, the run lines of this process are written by one thread
    (shared by the workers of a process that runs several); on leaving, the
    last worker to leave writes what is left."""
    global _writer, _writers
    with _writer_lock:
        if _writers == 0:
            _writer = LineWriter()
            _writer.start()
        _writers += 1
    try:
        yield
    finally:
        with _writer_lock:
            _writers -= 1
            if _writers == 0:
                writer, _writer = _writer, None
                assert writer is not None
                writer.close()
