"""Workflows of the fault-injection suite's tests of how a run ends: a broad
``except`` around the engine's control flow, a ``BaseException`` from user
code, and steps that never return. Imported by ``workflows.py``."""

from __future__ import annotations

import time
from typing import Any

from orchestration import workflow

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
