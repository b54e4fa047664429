"""Waiting for a run's result, from any process: ``wait_for_result`` and its
async form ``aget_result``.

A waiter reads the run; if it has not finished, it subscribes to the
process's listener (``listen.result_listener``), marks the run ``awaited``
and reads it again, then sleeps until the listener hands it the run's row
(read once for every waiter woken together). The mark comes after LISTEN is
in place and before that second read, so an end is either read or
announced, never missed; a run nobody waits for
is never marked, and its end sends no NOTIFY. Where LISTEN delivers nothing
(PgBouncer in transaction mode), or while the listener reconnects, waiters
read the run again every ``POLL_INTERVAL`` instead.

This module loads the model through the app registry, not by import, so that
``Workflow.wait_for_result`` can call it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.apps import apps
from django.db import connections

from .conf import conf
from .errors import InvalidWorkflowInput, OrchestrationError, WorkflowCancelled, WorkflowFailed
from .listen import ROW_COLUMNS, Mode, result_listener
from .validation import to_timedelta

#: What ``on_progress`` is: called with each new value of the run's progress (an async
#: waiter's may be a coroutine function).
OnProgress = Callable[[dict[str, Any]], Any]


class _Wait:
    """One caller's wait for one run: what to read, how to read the outcome,
    when to mark the run awaited, and how long to sleep between reads."""

    def __init__(
        self,
        workflow: Any,
        timeout: float | datetime.timedelta | None,
        what: str,
        on_progress: OnProgress | None = None,
    ) -> None:
        if on_progress is not None and not callable(on_progress):
            raise InvalidWorkflowInput(f"{what}: on_progress must be callable, not {on_progress!r:.80}.")
        self.on_progress = on_progress
        #: The progress last handed to ``on_progress`` (None: none yet).
        self.seen_progress: Any = None
        self.workflow_id = _workflow_id(workflow, what)
        self.timeout = None if timeout is None else to_timedelta(timeout, f"{what} timeout", allow_zero=True)
        self.ends = None if self.timeout is None else time.monotonic() + self.timeout.total_seconds()
        self.marked = False
        model = apps.get_model("orchestration", "Workflow")
        self.does_not_exist = model.DoesNotExist
        self.rows = model._default_manager.using(conf.DATABASE).filter(pk=self.workflow_id)
        self.read = self.rows.values(*ROW_COLUMNS)

    def outcome(self, row: dict[str, Any] | None) -> tuple[bool, Any]:
        """``(True, output)`` for a completed run, ``(False, None)`` for an
        unfinished one; raises for a failed, cancelled or missing one."""
        if row is None:
            raise self.does_not_exist(f"No workflow {self.workflow_id} to wait for.")
        status, described = row["status"], f"Workflow {self.workflow_id} ({row['workflow_type']})"
        if status == "completed":
            return True, row["output_data"]
        if status == "failed":
            raise WorkflowFailed(
                f"{described} failed: {row['error_message']}",
                workflow_id=self.workflow_id,
                error_message=row["error_message"],
            )
        if status == "cancelled":
            raise WorkflowCancelled(f"{described} was cancelled: {row['error_message']}")
        return False, None

    def new_progress(self, row: dict[str, Any] | None) -> Any:
        """The run's progress in ``row`` if ``on_progress`` has not had it yet, else None."""
        if self.on_progress is None or row is None:
            return None
        progress = row.get("progress")
        if progress is None or progress == self.seen_progress:
            return None
        self.seen_progress = progress
        return progress

    def to_mark(self) -> bool:
        """Whether to mark the run awaited now: once, when its end would be announced."""
        if self.marked or result_listener.mode != Mode.LISTENING:
            return False
        self.marked = True
        return True

    def pause(self) -> float | None:
        """Seconds to sleep before reading again (None: until woken); raises
        ``TimeoutError`` once the timeout has passed."""
        remaining = None if self.ends is None else self.ends - time.monotonic()
        if remaining is not None and remaining <= 0:
            raise TimeoutError(f"Workflow {self.workflow_id} did not finish within {self.timeout}.")
        poll = None if result_listener.mode == Mode.LISTENING else conf.POLL_INTERVAL
        if poll is None or remaining is None:
            return remaining if poll is None else poll
        return min(poll, remaining)


def wait_for_result(
    workflow: Any, timeout: float | datetime.timedelta | None = None, *, on_progress: OnProgress | None = None
) -> Any:
    """Wait until run ``workflow`` (a row or its id) finishes and return its
    output; raise ``WorkflowFailed`` if it failed, ``WorkflowCancelled`` if it
    was cancelled, ``TimeoutError`` if ``timeout`` (seconds or a timedelta)
    passes first, and ``Workflow.DoesNotExist`` if there is no such run (or it
    is deleted while waited for).

    ``on_progress(details)`` is called, in this thread, with the run's progress
    (``ctx.set_progress``) as it is when the wait starts and with each new
    value while it waits, woken as the result is; values written between two
    wake-ups are coalesced to the latest.

    Not inside ``transaction.atomic()``: a run started in it is invisible to
    workers until it commits, and the wait's mark would lock the run's row.
    """
    wait = _Wait(workflow, timeout, "wait_for_result", on_progress)
    if connections[conf.DATABASE].in_atomic_block:
        raise OrchestrationError(
            f"wait_for_result(workflow {wait.workflow_id}) was called inside transaction.atomic(): a run started "
            "in that transaction is invisible to workers until it commits. Wait after the commit."
        )
    row = wait.read.first()
    _report(wait, row)
    done, output = wait.outcome(row)
    if done:
        return output
    woken = threading.Event()
    delivered: list[dict[str, Any] | None] = []

    def wake(row: dict[str, Any] | None) -> None:
        delivered.append(row)
        woken.set()

    with result_listener.subscribed(wait.workflow_id, wake):
        row = None
        while True:
            if row is None:  # nothing delivered: read it
                if wait.to_mark():
                    wait.rows.update(awaited=True)
                row = wait.read.first()
            _report(wait, row)
            done, output = wait.outcome(row)
            if done:
                return output
            woken.wait(wait.pause())
            woken.clear()  # before taking what was delivered: a row delivered after it wakes the next wait
            row = _newest(delivered)


async def aget_result(
    workflow: Any, timeout: float | datetime.timedelta | None = None, *, on_progress: OnProgress | None = None
) -> Any:
    """``wait_for_result`` for async code: the wait holds no thread (the
    process's listener wakes this task with the run's row); the reads before
    it go through Django's async ORM. ``on_progress`` may be a plain function
    or a coroutine function (awaited)."""
    wait = _Wait(workflow, timeout, "aget_result", on_progress)
    row = await wait.read.afirst()
    await _areport(wait, row)
    done, output = wait.outcome(row)
    if done:
        return output
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    delivered: list[dict[str, Any] | None] = []

    def wake(row: dict[str, Any] | None) -> None:
        delivered.append(row)
        woken.set()

    with result_listener.subscribed(wait.workflow_id, lambda row: loop.call_soon_threadsafe(wake, row)):
        row = None
        while True:
            if row is None:  # nothing delivered: read it
                if wait.to_mark():
                    await wait.rows.aupdate(awaited=True)
                row = await wait.read.afirst()
            await _areport(wait, row)
            done, output = wait.outcome(row)
            if done:
                return output
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(woken.wait(), wait.pause())
            woken.clear()
            row = _newest(delivered)


def _newest(delivered: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Take what the listener delivered: the newest row (a run's end, or new
    progress, comes in several), or None (read the run) when nothing was, or
    a wake-up without a row (the listener's mode changed) was among them."""
    taken = len(delivered)  # the listener appends meanwhile: only what was there is taken
    rows = delivered[:taken]
    del delivered[:taken]
    if not rows or any(row is None for row in rows):
        return None
    return rows[-1]


def _report(wait: _Wait, row: dict[str, Any] | None) -> None:
    progress = wait.new_progress(row)
    if progress is not None:
        assert wait.on_progress is not None
        wait.on_progress(progress)


async def _areport(wait: _Wait, row: dict[str, Any] | None) -> None:
    progress = wait.new_progress(row)
    if progress is not None:
        assert wait.on_progress is not None
        reported = wait.on_progress(progress)
        if inspect.isawaitable(reported):
            await reported


def _workflow_id(workflow: Any, what: str) -> uuid.UUID:
    value = getattr(workflow, "pk", workflow)
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidWorkflowInput(f"{what}: {workflow!r} is neither a workflow nor a workflow id.") from None
