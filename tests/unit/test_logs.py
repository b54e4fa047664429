"""The log lines about runs: the same records as ``logging.Logger``'s, and, in a
worker process, handed to the handlers by one thread."""

from __future__ import annotations

import io
import itertools
import logging
import os
import sys
import threading
import time
import warnings

import pytest

from orchestration.observability import logs
from tests.support import RecordingHandler

logger = logging.getLogger("orchestration.tests.logs")
run_logger = logs.RunLogger("orchestration.tests.logs")


@pytest.fixture
def recording():
    handler = RecordingHandler()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)


def messages(handler: RecordingHandler) -> list[str]:
    return [record.getMessage() for record, _ in handler.handled]


def test_info__the_record_logger_info_makes__with_the_callers_file_line_and_function(recording):
    logger.info("workflow %s completed in %.3fs", "abc", 0.25)
    run_logger.info("workflow %s completed in %.3fs", "abc", 0.25)
    (standard, _), (fast, _) = recording.handled
    assert fast.getMessage() == standard.getMessage() == "workflow abc completed in 0.250s"
    assert (fast.pathname, fast.funcName, fast.levelno) == (standard.pathname, standard.funcName, logging.INFO)
    assert fast.lineno == standard.lineno + 1


def test_info__below_the_loggers_level__makes_no_record(recording):
    logger.setLevel(logging.WARNING)
    run_logger.info("not %s", "made")
    assert recording.handled == []


def test_exception__carries_the_exception_being_handled(recording):
    try:
        raise ValueError("boom")
    except ValueError:
        run_logger.exception("workflow %s failed", "abc")
    ((record, _),) = recording.handled
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None and isinstance(record.exc_info[1], ValueError)


def test_outside_a_worker__a_line_is_handled_at_once_by_the_thread_that_logs(recording):
    run_logger.warning("workflow %s released", "abc")
    assert [(record.getMessage(), thread) for record, thread in recording.handled] == [
        ("workflow abc released", threading.current_thread().name)
    ]


def test_in_a_worker__the_lines_are_handled_by_one_writer_thread_in_the_order_they_were_made(recording):
    def log_lines(n: int) -> None:
        for line in range(50):
            run_logger.info("thread %d line %d", n, line)

    with logs.writing():
        threads = [threading.Thread(target=log_lines, args=(n,), name=f"logging-{n}") for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(recording.handled) == 200  # every line handled by the time the worker leaves
    assert {thread for _, thread in recording.handled} == {"orchestration-log-writer"}
    for n in range(4):
        assert [m for m in messages(recording) if m.startswith(f"thread {n} ")] == [
            f"thread {n} line {line}" for line in range(50)
        ]
    assert {record.threadName for record, _ in recording.handled} == {f"logging-{n}" for n in range(4)}


def test_in_a_worker__a_filter_that_raises_loses_that_line_only(recording, capsys):
    def refuse_one(record: logging.LogRecord) -> bool:
        if record.getMessage() == "line 2":
            raise RuntimeError("a broken filter")
        return True

    logger.addFilter(refuse_one)
    try:
        with logs.writing():
            for line in range(1, 4):
                run_logger.info("line %d", line)
    finally:
        logger.removeFilter(refuse_one)
    assert messages(recording) == ["line 1", "line 3"]
    assert "a broken filter" in capsys.readouterr().err


def test_two_workers_in_one_process__share_the_writer_until_the_last_leaves(recording):
    first, second = logs.writing(), logs.writing()
    first.__enter__()
    second.__enter__()
    run_logger.info("while both run")
    first.__exit__(None, None, None)
    run_logger.info("while the second runs")
    second.__exit__(None, None, None)
    run_logger.info("after both")
    assert messages(recording) == ["while both run", "while the second runs", "after both"]
    assert [thread for _, thread in recording.handled[:2]] == ["orchestration-log-writer"] * 2
    assert recording.handled[2][1] == threading.current_thread().name


@pytest.fixture
def lines_file(tmp_path):
    """A file the test logger's INFO lines are written to, by a FileHandler."""
    path = tmp_path / "lines.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(process)d %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield path
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(logging.NOTSET)


def test_in_a_child_forked_while_a_worker_runs__a_line_is_handled_at_once(lines_file):
    with logs.writing(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork() with the writer thread running
        child = os.fork()
        if child == 0:
            run_logger.info("from the child")
            os._exit(0)
        os.waitpid(child, 0)
    assert lines_file.read_text() == f"{child} from the child\n"


# -- records copied from a line's first ---------------------------------------------


def log_twice(*args) -> None:
    """Two records from one line of code: the second is copied from the first."""
    for _ in range(2):
        run_logger.info(*args)


@pytest.fixture
def fixed_time(monkeypatch):
    """Both clocks LogRecord may read, stopped at an instant just before a second's end."""
    monkeypatch.setattr(time, "time", lambda: 1_700_000_000.9995)
    monkeypatch.setattr(time, "time_ns", lambda: 1_700_000_000_999_500_000)


def test_a_lines_second_record__has_every_field_make_record_gives(recording, fixed_time):
    log_twice("workflow %s step %d", "abc", 2)
    first, second = recording.records
    code = log_twice.__code__
    made = logger.makeRecord(
        logger.name, logging.INFO, code.co_filename, first.lineno, "workflow %s step %d", ("abc", 2), None, "log_twice"
    )
    fields = vars(made)  # those the record is made with: handlers add others (the message, the time's text)
    assert {key: vars(second)[key] for key in fields} == {key: vars(first)[key] for key in fields} == fields
    assert second is not first and second.getMessage() == "workflow abc step 2"


def test_a_lines_records__carry_their_own_time(recording):
    log_twice("at a time")
    first, second = recording.records
    assert (second.created, second.relativeCreated) > (first.created, first.relativeCreated)


def test_a_record_made_in_another_thread__carries_that_threads_name_and_id(recording):
    log_twice("here")
    thread = threading.Thread(target=log_twice, args=("there",), name="another")
    thread.start()
    thread.join()
    assert [(record.threadName, record.thread) for record in recording.records[2:]] == [("another", thread.ident)] * 2


def test_a_thread_renamed_between_two_lines__its_second_record_carries_the_new_name(recording):
    def log_renamed() -> None:
        for name in ("before", "after"):
            threading.current_thread().name = name
            run_logger.info("named")

    thread = threading.Thread(target=log_renamed)
    thread.start()
    thread.join()
    assert [record.threadName for record in recording.records] == ["before", "after"]


def test_a_single_mapping_argument__formats_by_key_as_logging_does(recording):
    log_twice("workflow %(id)s", {"id": "abc"})
    assert [record.getMessage() for record in recording.records] == ["workflow abc"] * 2


def test_a_record_factory_set__makes_every_record(recording):
    standard = logging.getLogRecordFactory()

    def tagged(*args, **kwargs):
        record = standard(*args, **kwargs)
        record.tag = "made by the factory"
        return record

    log_twice("before the factory")
    logging.setLogRecordFactory(tagged)
    try:
        log_twice("with the factory")
    finally:
        logging.setLogRecordFactory(standard)
    assert [getattr(record, "tag", None) for record in recording.records[2:]] == ["made by the factory"] * 2


@pytest.mark.skipif(sys.version_info < (3, 12), reason="LogRecord.taskName is new in Python 3.12")
def test_in_a_running_asyncio_task__each_record_names_its_task(recording):
    import asyncio

    async def in_tasks() -> None:
        for name in ("first", "second"):
            await asyncio.create_task(asyncio.to_thread(lambda: None), name="helper")
            await asyncio.create_task(_log_in_a_task(), name=name)

    async def _log_in_a_task() -> None:
        run_logger.info("in a task")

    asyncio.run(in_tasks())
    assert [record.taskName for record in recording.records] == ["first", "second"]


def test_a_record_made_in_a_forked_child__carries_the_childs_process_id(lines_file):
    def log_process() -> None:
        run_logger.info("process")

    log_process()  # the parent's first record of the line
    child = os.fork()
    if child == 0:
        log_process()
        os._exit(0)
    os.waitpid(child, 0)
    assert lines_file.read_text().splitlines() == [f"{os.getpid()} process", f"{child} process"]


# -- the writer's own hand-over to the standard handlers ---------------------------


class CountingStream(io.StringIO):
    """A stream that counts its writes."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


LOGGER_NUMBERS = itertools.count()


def configured(name: str, make_handler) -> tuple[logging.Logger, logging.Handler]:
    # A new logger a test: pytest adds its capture handlers to the loggers that do not propagate.
    configured_logger = logging.getLogger(f"orchestration.tests.handover.{name}.{next(LOGGER_NUMBERS)}")
    configured_logger.propagate = False
    configured_logger.setLevel(logging.INFO)
    handler = make_handler()
    configured_logger.addHandler(handler)
    return configured_logger, handler


@pytest.fixture
def handlers():
    """``handlers(make_handler)``: two loggers configured alike, one for
    ``Logger.handle`` and one for ``logs.hand_over``, as (logger, handler) pairs."""
    made = []

    def make(make_handler):
        pair = [configured("standard", make_handler), configured("writer", make_handler)]
        made.extend(pair)
        return pair

    yield make
    for configured_logger, handler in made:
        configured_logger.removeHandler(handler)
        handler.close()


LINES = [
    (
        logging.INFO,
        'workflow %s (%s) step %d "%s" completed in %.3fs',
        ("0190-abc", "benchmark", 2, "step 2", 0.000123),
    ),
    (logging.WARNING, "workflow %s released", ("0190-abc",)),
    (logging.INFO, "no arguments, a literal %%", ()),
]


def records(lines=LINES, exc_info=None) -> list[logging.LogRecord]:
    return [
        logging.LogRecord("orchestration.tests.handover", level, __file__, 1, message, args, exc_info, "a_function")
        for level, message, args in lines
    ]


def handed(pair, batch: list[logging.LogRecord]) -> None:
    """``batch`` to each logger of ``pair``: by ``Logger.handle``, and by ``hand_over``."""
    (standard_logger, _), (writer_logger, _) = pair
    for record in batch:
        standard_logger.handle(record)
    logs.hand_over([(writer_logger, record) for record in batch])


def written(pair, batch: list[logging.LogRecord] | None = None) -> tuple[str, str]:
    """What each handler of ``pair`` wrote of ``batch``, handed to both."""
    handed(pair, records() if batch is None else batch)
    return pair[0][1].stream.getvalue(), pair[1][1].stream.getvalue()


def stream_handler(fmt: str | None = None, datefmt: str | None = None, style: str = "%", **options):
    def make() -> logging.Handler:
        handler = logging.StreamHandler(CountingStream())
        if fmt is not None:
            handler.setFormatter(logging.Formatter(fmt, datefmt, style, **options))  # type: ignore[arg-type]
        return handler

    return make


@pytest.mark.parametrize(
    "make_handler",
    [
        stream_handler("%(asctime)s %(levelname)s %(name)s: %(message)s"),
        stream_handler("%(asctime)s [%(process)d:%(threadName)s] %(module)s.%(funcName)s:%(lineno)d %(message)s"),
        stream_handler("%(asctime)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%S%z"),
        stream_handler("{asctime} {levelname:>8} {message}", style="{"),
        stream_handler("$asctime $levelname $message", style="$"),
        stream_handler("%(message)s %(service)s", defaults={"service": "orders"}),
        stream_handler(),  # no formatter: logging's default one
    ],
    ids=["percent", "record-fields", "datefmt", "brace", "dollar", "defaults", "no-formatter"],
)
def test_hand_over__a_stream_handler__writes_the_text_logger_handle_writes(handlers, make_handler):
    standard, writer = written(handlers(make_handler))
    assert writer == standard
    assert len(writer.splitlines()) == len(LINES)


def test_hand_over__a_formatter_in_utc__writes_the_text_logger_handle_writes(handlers):
    def make() -> logging.Handler:
        handler = stream_handler("%(asctime)s %(message)s")()
        assert handler.formatter is not None
        handler.formatter.converter = time.gmtime
        return handler

    standard, writer = written(handlers(make))
    assert writer == standard


def test_hand_over__a_file_handler__writes_the_text_logger_handle_writes(handlers, tmp_path):
    paths = iter([tmp_path / "standard.log", tmp_path / "writer.log"])

    def make() -> logging.Handler:
        handler = logging.FileHandler(next(paths))
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        return handler

    pair = handlers(make)
    handed(pair, records())
    for _, handler in pair:
        handler.flush()
    assert (tmp_path / "writer.log").read_text() == (tmp_path / "standard.log").read_text()


def test_hand_over__a_batch_for_a_stream_handler__is_one_write(handlers):
    (standard_logger, standard), (writer_logger, writer) = handlers(stream_handler("%(message)s"))
    handed([(standard_logger, standard), (writer_logger, writer)], records(LINES * 20))
    assert (standard.stream.writes, writer.stream.writes) == (len(LINES) * 20, 1)
    assert writer.stream.getvalue() == standard.stream.getvalue()


def test_hand_over__a_record_with_an_exception__goes_out_in_its_place(handlers):
    try:
        raise ValueError("boom")
    except ValueError:
        [failed] = records([(logging.ERROR, "failed", ())], exc_info=sys.exc_info())
    first, *rest = records()
    standard, writer = written(handlers(stream_handler("%(levelname)s %(message)s")), [first, failed, *rest])
    assert writer == standard
    assert "ValueError: boom" in writer
    assert writer.index("completed in") < writer.index("ERROR failed") < writer.index("released")


def test_hand_over__a_handler_with_a_filter__writes_what_its_filter_lets_through(handlers):
    def make() -> logging.Handler:
        handler = stream_handler("%(message)s")()
        handler.addFilter(lambda record: "released" not in record.getMessage())
        return handler

    standard, writer = written(handlers(make))
    assert writer == standard
    assert "released" not in writer


def test_hand_over__a_handler_subclass__emits_each_record_itself(handlers):
    class Prefixing(logging.StreamHandler):
        def emit(self, record: logging.LogRecord) -> None:
            self.stream.write("> " + self.format(record) + "\n")

    standard, writer = written(handlers(lambda: Prefixing(CountingStream())))
    assert writer == standard
    assert writer.count("> ") == len(LINES)


def test_hand_over__a_message_that_does_not_format__is_reported_and_the_others_written(handlers, capsys):
    first, *rest = records()
    [broken] = records([(logging.INFO, "step %d", ("not a number",))])
    standard, writer = written(handlers(stream_handler("%(message)s")), [first, broken, *rest])
    assert writer == standard
    assert len(writer.splitlines()) == len(LINES)
    assert capsys.readouterr().err.count("--- Logging error ---") == 2  # once for each logger
