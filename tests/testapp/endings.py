"""Workflows of the fault-injection suite's tests of how a run ends: a broad
``except`` around the engine's control flow, a ``BaseException`` from user
code, and steps that never return. Imported by ``workflows.py``."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from django.db import connection

from orchestration import workflow

from .models import StepRun
from .workflows import record


@workflow("sleeps_in_a_broad_except", max_retries=0)
def sleeps_in_a_broad_except(ctx: Any, data: dict[str, float]) -> Any:
    try:
        ctx.sleep("nap", data["seconds"])
    except Exception:
        record(ctx, 99, "handler")
    return ctx.step("after the nap", record, ctx, 2, "after the nap")


@workflow("swallows_every_error", max_retries=0)
def swallows_every_error(ctx: Any, data: dict[str, float]) -> Any:
    """Code that swallows any error of a step and goes on to the next one."""
    for number in (1, 2, 3):
        try:
            ctx.step(f"step {number}", record, ctx, number, f"step {number}", None, data["seconds"])
        except Exception:
            record(ctx, 100 + number, "handler")
    return {"finished": True}


class LibraryAbort(BaseException):
    """A library's own ``BaseException`` subclass (as gevent's ``GreenletExit``)."""


INTERRUPTIONS: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "LibraryAbort": LibraryAbort,
}


def interrupt_first_attempt(ctx: Any, kind: str) -> dict[str, int]:
    record(ctx, 1, f"attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise INTERRUPTIONS[kind](f"{kind} from a step")
    return {"attempt": ctx.attempt}


@workflow("interrupted_step", max_retries=2)
def interrupted_step(ctx: Any, data: dict[str, str]) -> Any:
    return ctx.step("interrupted", interrupt_first_attempt, ctx, data["kind"])


@workflow("interrupted_function", max_retries=2)
def interrupted_function(ctx: Any, data: dict[str, str]) -> Any:
    ctx.step("before", record, ctx, 1, f"before, attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise INTERRUPTIONS[data["kind"]]("from the workflow function")
    return {"attempt": ctx.attempt}


def hang_on_first_attempt(ctx: Any, seconds: float, timeout: float | None = None) -> dict[str, int]:
    """A call that hangs on the first attempt; a ``timeout`` of its own does not
    help (as a C call that does not honour one)."""
    record(ctx, 1, f"attempt {ctx.attempt}")
    if ctx.attempt == 1:
        time.sleep(seconds)
    return {"attempt": ctx.attempt}


@workflow("hangs_once", max_retries=2)
def hangs_once(ctx: Any, data: dict[str, float]) -> Any:
    return ctx.step("hang", hang_on_first_attempt, ctx, data["hang"], timeout=data["timeout"])


@workflow("hangs_once_by_default", max_retries=2, step_timeout=1)
def hangs_once_by_default(ctx: Any, data: dict[str, float]) -> Any:
    return ctx.step("hang", hang_on_first_attempt, ctx, data["hang"])


def read_then_hang(ctx: Any, seconds: float, report: str | None = None) -> dict[str, int]:
    """Reads a row, then waits on an outside call with no timeout of its own (an
    HTTP client without one); afterwards tries the database again and writes
    what that did to ``report``, a file (the database may refuse it)."""
    record(ctx, 1, f"attempt {ctx.attempt}")
    time.sleep(seconds)
    if report is not None:
        try:
            outcome = f"read {StepRun.objects.filter(workflow_id=ctx.workflow_id).count()} rows"
        except Exception as exc:
            outcome = f"{type(exc).__module__}.{type(exc).__name__}: {exc}"
        with open(report, "w") as file:
            file.write(outcome)
    return {"attempt": ctx.attempt}


@workflow("reads_then_hangs", max_retries=2)
def reads_then_hangs(ctx: Any, data: dict[str, Any]) -> Any:
    return ctx.step("read then hang", read_then_hang, ctx, data["hang"], data.get("report"), timeout=data["timeout"])


def hang_ignoring_errors_on_first_attempt(ctx: Any, seconds: float) -> dict[str, int]:
    """Uses the database, then keeps hanging on the first attempt whatever its
    queries raise (as code that retries forever in a broad ``except``)."""
    record(ctx, 1, f"attempt {ctx.attempt}")
    if ctx.attempt == 1:
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:
            time.sleep(0.1)
            with contextlib.suppress(Exception):
                StepRun.objects.exists()
    return {"attempt": ctx.attempt}


@workflow("hangs_ignoring_errors", max_retries=2)
def hangs_ignoring_errors(ctx: Any, data: dict[str, float]) -> Any:
    return ctx.step("hang", hang_ignoring_errors_on_first_attempt, ctx, data["hang"], timeout=data["timeout"])


def sleep_in_the_database(ctx: Any, seconds: float) -> None:
    """A query that hangs in the server (a lock wait, a slow plan): ``pg_sleep``,
    marked with the run's id so that a test finds it in ``pg_stat_activity``."""
    record(ctx, 1, "sleeping in the database")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT pg_sleep({float(seconds)}) /* sleeper {ctx.workflow_id} */")


@workflow("sleeps_in_the_database", max_retries=0)
def sleeps_in_the_database(ctx: Any, data: dict[str, float]) -> Any:
    return ctx.step("sleep in the database", sleep_in_the_database, ctx, data["seconds"], timeout=data.get("timeout"))
