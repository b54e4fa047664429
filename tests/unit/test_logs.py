"""The log lines about runs: the same records as ``logging.Logger``'s, and, in a
worker process, handed to the handlers by one thread."""

from __future__ import annotations

import logging
import os
import threading
import warnings

import pytest

from orchestration import logs
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


def test_in_a_child_forked_while_a_worker_runs__a_line_is_handled_at_once(tmp_path):
    written = tmp_path / "child.log"
    handler = logging.FileHandler(written)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with logs.writing(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork() with the writer thread running
            child = os.fork()
            if child == 0:
                run_logger.info("from the child")
                os._exit(0)
            os.waitpid(child, 0)
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(logging.NOTSET)
    assert written.read_text() == "from the child\n"
