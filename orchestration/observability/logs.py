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

Handing a record to its handlers runs about a hundred lines of Python
(``Logger.handle``, the walk of the handlers, each handler's filters, lock,
format, write and flush), and ``strftime`` alone is a tenth of a line's
instructions. So the writer hands a batch to the standard stream and file
handlers (exactly ``StreamHandler`` or ``FileHandler``, with exactly a
``Formatter``, and no filters on the handler or the record's logger) itself:
each record formatted by the handler's own formatter, as ``Formatter.format``
does, and the batch's lines written with one ``write`` and one flush under
the handler's lock. The text is the same; any other handler, filter or
record (one with an exception or a stack) takes ``Logger.handle``, in order.

Making a record (``LogRecord.__init__``) is a third of a line's cost, and most
of it is the same at every line of code in a thread: the file, module,
function, thread and process. So a thread's record of a line of code is
copied from the first it made there, given its own message, arguments and time.
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
from asyncio.events import _get_running_loop
from collections.abc import Iterator, Mapping
from typing import Any

#: How long the writer lets lines gather before it writes them.
WRITE_EVERY = 0.02
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
        if exc_info is None:
            record = make_record(logger, level, frame.f_code, frame.f_lineno, message, args)
        else:
            code = frame.f_code
            record = logger.makeRecord(
                logger.name, level, code.co_filename, frame.f_lineno, message, args, exc_info, code.co_name
            )
        writer = _writer
        if writer is None:
            logger.handle(record)
        else:
            writer.put(logger, record)


class _FirstRecords(threading.local):
    """A thread's first record of each line of code that logged, and the facts
    of the thread and process it was made under."""

    def __init__(self) -> None:  # in each thread, at its first use there
        self.thread = threading.current_thread()
        self.fields: dict[tuple[Any, ...], tuple[Any, dict[str, Any]]] = {}
        self.facts: tuple[Any, ...] = ()


_first_records = _FirstRecords()
_MAKE_RECORD = logging.Logger.makeRecord
#: Whether this Python's ``LogRecord`` names the asyncio task (3.12 and later).
_TASK_NAMES = hasattr(logging, "logAsyncioTasks")
#: Whether this Python's ``LogRecord`` reads the time in nanoseconds (3.13 and later).
_TIME_IN_NS = isinstance(logging._startTime, int)  # type: ignore[attr-defined]


def make_record(
    logger: logging.Logger, level: int, code: Any, lineno: int, message: str, args: tuple[Any, ...]
) -> logging.LogRecord:
    """``logger.makeRecord``'s record of a line logged at ``lineno`` of ``code``
    (without an exception): a copy of the first this thread made there, with
    its own message, arguments and time. Made in full where a record factory,
    a ``makeRecord`` of the logger's own or a running asyncio task (the
    record's ``taskName``) may make it otherwise."""
    if (
        logging.getLogRecordFactory() is not logging.LogRecord
        or type(logger).makeRecord is not _MAKE_RECORD
        or "makeRecord" in vars(logger)
        or (_TASK_NAMES and logging.logAsyncioTasks and _get_running_loop() is not None)  # type: ignore[attr-defined,unused-ignore]
    ):
        return logger.makeRecord(logger.name, level, code.co_filename, lineno, message, args, None, code.co_name)
    first = _first_records
    multiprocessing = sys.modules.get("multiprocessing")
    facts = (
        first.thread.name,
        multiprocessing.current_process().name if multiprocessing is not None else None,
        logging.logThreads,
        logging.logProcesses,
        logging.logMultiprocessing,
    )
    if first.facts != facts:  # a thread renamed, a flag of logging's changed: start again
        first.fields, first.facts = {}, facts
    # By the code's id (a code object hashes its whole text); the fields keep
    # the code, so that no other code takes its id while they are kept.
    key = (logger, level, id(code), lineno)
    kept = first.fields.get(key)
    if kept is None:
        record = logger.makeRecord(logger.name, level, code.co_filename, lineno, message, args, None, code.co_name)
        first.fields[key] = (code, vars(record).copy())
        return record
    fields = kept[1].copy()
    # A single mapping is the arguments, as LogRecord takes it: "%(key)s" formats.
    single = len(args) == 1 and isinstance(args[0], Mapping) and args[0]
    fields["msg"], fields["args"], fields["levelname"] = (
        message,
        args[0] if single else args,
        logging.getLevelName(level),
    )
    # The time fields, as this Python's LogRecord.__init__ sets them.
    if _TIME_IN_NS:
        ns = time.time_ns()
        created = fields["created"] = ns / 1e9
        msecs = (ns % 1_000_000_000) // 1_000_000 + 0.0
        fields["msecs"] = 0.0 if msecs == 999.0 and int(created) != ns // 1_000_000_000 else msecs
        fields["relativeCreated"] = (ns - logging._startTime) / 1e6  # type: ignore[attr-defined]
    else:
        now = fields["created"] = time.time()
        fields["msecs"] = int((now - int(now)) * 1000) + 0.0
        fields["relativeCreated"] = (now - logging._startTime) * 1000  # type: ignore[attr-defined]
    record = logging.LogRecord.__new__(logging.LogRecord)
    record.__dict__ = fields
    return record


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
        batch = []
        while lines:
            try:
                batch.append(lines.popleft())
            except IndexError:  # another thread took the last one
                break
        if batch:
            hand_over(batch)


#: The handlers the writer formats and writes for itself (exactly these types:
#: a subclass may emit otherwise).
PLAIN_HANDLERS = (logging.StreamHandler, logging.FileHandler)


#: The methods whose work the writer does for a plain handler: one set on an
#: instance (a test's patch, a deployment's hook) sends its records through them.
_LOGGER_METHODS = frozenset({"handle", "callHandlers", "filter"})
_HANDLER_METHODS = frozenset({"handle", "filter", "emit", "format", "flush"})
_FORMATTER_METHODS = frozenset({"format", "formatTime", "formatMessage", "usesTime"})


def _patched(instance: object, methods: frozenset[str]) -> bool:
    return not methods.isdisjoint(vars(instance))


#: What ``Handler.format`` uses when a handler has no formatter.
_DEFAULT_FORMATTER: logging.Formatter = logging._defaultFormatter  # type: ignore[attr-defined]


class _Stream:
    """A plain handler's lines of one batch, written together."""

    __slots__ = ("handler", "last", "lines")

    def __init__(self, handler: logging.StreamHandler[Any]) -> None:
        self.handler = handler
        self.lines: list[str] = []
        self.last: logging.LogRecord | None = None

    def write(self) -> None:
        handler, self.lines, text = self.handler, [], "".join(self.lines)
        with handler.lock:  # type: ignore[union-attr]  # a Handler's lock, made by createLock()
            try:
                handler.stream.write(text)
                handler.flush()
            except Exception:
                handler.handleError(self.last)  # type: ignore[arg-type]


def _plain_route(logger: logging.Logger, record: logging.LogRecord, streams: dict[int, _Stream]) -> list[Any] | None:
    """The handlers ``logger.handle(record)`` would emit ``record`` to, as
    (stream, formatter) pairs, if all are plain and nothing filters it; else None."""
    if logger.disabled or logger.filters or type(logger) is not logging.Logger or _patched(logger, _LOGGER_METHODS):
        return None
    route: list[Any] = []
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if record.levelno < handler.level:
                continue
            if type(handler) not in PLAIN_HANDLERS or handler.filters or _patched(handler, _HANDLER_METHODS):
                return None
            formatter = handler.formatter or _DEFAULT_FORMATTER
            if type(formatter) is not logging.Formatter or _patched(formatter, _FORMATTER_METHODS):
                return None
            if handler.stream is None:  # type: ignore[attr-defined]  # a FileHandler's delayed open
                return None
            stream = streams.get(id(handler))
            if stream is None:
                stream = streams[id(handler)] = _Stream(handler)  # type: ignore[arg-type]
            route.append((stream, formatter))
        current = current.parent if current.propagate else None
    return route or None  # no handler at all: logging's last resort


def hand_over(batch: list[tuple[logging.Logger, logging.LogRecord]]) -> None:
    """Hand each record of ``batch`` to its logger's handlers, in order: the
    plain ones written by batch, the rest by ``Logger.handle``."""
    streams: dict[int, _Stream] = {}
    routes: dict[tuple[int, int], list[Any] | None] = {}
    formatting = _Formatting()
    for logger, record in batch:
        route = None
        if record.exc_info is None and record.exc_text is None and record.stack_info is None:
            key = (id(logger), record.levelno)
            if key not in routes:
                routes[key] = _plain_route(logger, record, streams)
            route = routes[key]
        if route is not None:
            try:
                lines = formatting.lines(record, route)
            except Exception:  # a message that does not format: logging reports it, as for any line
                route = None
        if route is None:
            _write_pending(streams)  # what came before goes out first
            try:
                logger.handle(record)
            except Exception:  # a filter's error: the writer must go on for the other lines
                if logging.raiseExceptions:
                    traceback.print_exc(file=sys.stderr)
            continue
        for (stream, _), line in zip(route, lines, strict=True):
            stream.lines.append(line)
            stream.last = record
    _write_pending(streams)


class _Formatting:
    """What a batch's records share in their format: whether each formatter
    uses the time, and the time's text for each second (``strftime`` is a
    tenth of a line's cost, and a batch's lines fall in a second or two)."""

    def __init__(self) -> None:
        self.uses_time: dict[int, bool] = {}
        self.seconds: dict[tuple[Any, ...], str] = {}

    def lines(self, record: logging.LogRecord, route: list[Any]) -> list[str]:
        """``record``'s line for each handler of ``route``: ``Formatter.format``'s
        text (for a record without exception or stack) and the handler's terminator."""
        record.message = record.getMessage()
        lines = []
        for stream, formatter in route:
            timed = self.uses_time.get(id(formatter))
            if timed is None:
                timed = self.uses_time[id(formatter)] = formatter.usesTime()
            if timed:
                record.asctime = self.asctime(formatter, record)
            lines.append(formatter.formatMessage(record) + stream.handler.terminator)
        return lines

    def asctime(self, formatter: logging.Formatter, record: logging.LogRecord) -> str:
        """``Formatter.formatTime(record, formatter.datefmt)``, its ``strftime``
        (and the standard converters' conversion) done once a second."""
        converter = formatter.converter
        if converter is time.localtime or converter is time.gmtime:  # a function of the whole second
            key: tuple[Any, ...] = (id(formatter), int(record.created))
        else:
            moment = converter(record.created)
            key = (id(formatter), moment, moment.tm_zone)
        text = self.seconds.get(key)
        if text is None:
            moment = converter(record.created)
            text = self.seconds[key] = time.strftime(formatter.datefmt or formatter.default_time_format, moment)
        if formatter.datefmt or not formatter.default_msec_format:
            return text
        return formatter.default_msec_format % (text, record.msecs)


def _write_pending(streams: dict[int, _Stream]) -> None:
    for stream in streams.values():
        if stream.lines:
            stream.write()


_writer: LineWriter | None = None
_writers = 0
_writer_lock = threading.Lock()


def _forked() -> None:
    """In a child forked by a step, which has none of its parent's threads: lines are handled at once."""
    global _writer, _writers, _writer_lock, _first_records
    _writer, _writers, _writer_lock = None, 0, threading.Lock()
    _first_records = _FirstRecords()  # the parent's process id


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
