"""``ctx`` of an ``async def`` workflow: ``await ctx.step(...)``, with the
checkpoints, waits and guarantees of a sync workflow's.

An async run occupies its worker thread as a sync one does: the thread runs it
with asgiref's ``async_to_sync`` (``run``), which runs the workflow function in
an event loop beside the thread and lends the thread itself back for every
``sync_to_async(thread_sensitive=True)`` call. The engine's writes go through
that: they are the sync context's own methods, on the thread's connection, so
a step's start, checkpoint and failure are the same fenced statements as in a
sync workflow, and the heartbeat, the sweep and crash recovery see no difference.

An ``async def`` step body runs in the loop; its timeout, the run's deadline
and a lost lease (a cancel, a reclaim) cancel it there, which a sync body in a
thread never can be. A sync step body runs on the worker's thread, as in a sync
workflow (the ORM refuses to run inside an event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import inspect
import time
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async

from . import observe
from .context import ChildHandle, WorkflowContext
from .errors import ControlFlow, DeadlineExceeded, LeaseLost, PermanentError, StepTimeout
from .validation import to_json_value, validate_step_timeout

#: How often an async step body is checked for a lost lease while it runs (seconds).
LOST_CHECK_INTERVAL = 0.25
#: How long a cancelled async step body is given to finish its cleanup before the run moves on (seconds).
CANCEL_GRACE = 5.0


def run(function: Callable[[Any, Any], Coroutine[Any, Any, Any]], ctx: WorkflowContext, data: Any) -> Any:
    """Run an async workflow function (given an ``AsyncWorkflowContext``) to its end from the worker's thread."""
    return async_to_sync(function)(ctx, data)


def _on_thread(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of the sync context, run on the worker's thread (its connection)."""
    return sync_to_async(method, thread_sensitive=True)


class AsyncWorkflowContext(WorkflowContext):
    """Passed to an ``async def`` workflow as ``ctx``: every method of
    ``WorkflowContext`` that may wait is a coroutine here (``await ctx.step``,
    ``await ctx.sleep`` ...); the properties (``workflow_id``, ``attempt``,
    ``input`` ...) are the same."""

    def patched(self, change_id: str) -> _Decision:  # type: ignore[override]
        """``WorkflowContext.patched``, awaited: ``if await ctx.patched("id"):``.
        The first decision records the patch, a write made on the worker's thread."""
        return _Decision(change_id, _on_thread(super().patched)(change_id))

    async def deprecate_patch(self, change_id: str) -> None:  # type: ignore[override]
        """``WorkflowContext.deprecate_patch``, awaited."""
        await _on_thread(super().deprecate_patch)(change_id)

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        timeout: float | datetime.timedelta | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once and checkpoint its JSON result, as
        ``WorkflowContext.step``; ``fn`` may be ``async def`` (awaited in the
        loop) or a plain function (run on the worker's thread)."""
        if not inspect.iscoroutinefunction(fn):
            return await _on_thread(super().step)(name, fn, *args, timeout=timeout, **kwargs)
        with observe.step_report(self, name) or contextlib.nullcontext():  # as the sync step's decorator reports
            return await self._async_step(name, fn, args, kwargs, timeout)

    async def _async_step(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, timeout: float | datetime.timedelta | None
    ) -> Any:
        limit = self._step_timeout if timeout is None else validate_step_timeout(timeout, f"ctx.step({name!r}) timeout")
        number, done, output = await _on_thread(self._begin)(name, True)
        if done:
            return output
        started = time.monotonic()
        try:
            result = await self._within(number, name, limit, fn(*args, **kwargs))
            output = to_json_value(result, f"The result of step {number} {name!r}")
        except ControlFlow:
            raise
        except BaseException as exc:
            await _on_thread(self._record_step_failure)(number, name, exc, started)
            raise
        self._run.defer_checkpoint(number, name, output)
        self._completed(number, name, output, started)
        return output

    async def atomic_step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``WorkflowContext.atomic_step``: ``fn`` (a plain function) runs on the
        worker's thread inside ``transaction.atomic()`` with its checkpoint."""
        return await _on_thread(super().atomic_step)(name, fn, *args, **kwargs)

    async def sleep(self, name: str, duration: float | datetime.timedelta) -> None:  # type: ignore[override]
        """``WorkflowContext.sleep``: a durable timer; the run is released while it waits."""
        await _on_thread(super().sleep)(name, duration)

    async def wait_for_event(self, name: str, timeout: float | datetime.timedelta | None = None) -> Any:
        """``WorkflowContext.wait_for_event``."""
        return await _on_thread(super().wait_for_event)(name, timeout)

    async def start_child(self, workflow_type: str, input_data: Any = None, **options: Any) -> ChildHandle:  # type: ignore[override]
        """``WorkflowContext.start_child``."""
        return await _on_thread(super().start_child)(workflow_type, input_data, **options)

    async def wait_for(self, handles: Sequence[ChildHandle]) -> list[Any]:  # type: ignore[override]
        """``WorkflowContext.wait_for``."""
        return await _on_thread(super().wait_for)(handles)

    async def _within(self, number: int, name: str, limit: float | None, body: Any) -> Any:
        """Await ``body``, cancelling it at the step's ``limit`` (``StepTimeout``),
        the run's deadline (``DeadlineExceeded``) or a lost lease (``LeaseLost``)."""
        run = self._run
        now = time.monotonic()
        ends = [(now + limit, "timeout")] if limit is not None else []
        if run.deadline is not None:
            ends.append((now + (run.deadline - datetime.datetime.now(datetime.UTC)).total_seconds(), "deadline"))
        task = asyncio.ensure_future(body)
        try:
            while True:
                first = min(ends, default=None)
                wait = LOST_CHECK_INTERVAL if first is None else min(LOST_CHECK_INTERVAL, first[0] - time.monotonic())
                finished, _ = await asyncio.wait({task}, timeout=max(0.0, wait))
                if finished:
                    return task.result()
                if run.lost.is_set():
                    raise LeaseLost(f"Workflow {run.id} is no longer held by this worker.")
                if first is not None and time.monotonic() >= first[0]:
                    if first[1] == "deadline":
                        raise DeadlineExceeded(f'Workflow {run.id} reached its deadline during step {number} "{name}".')
                    raise StepTimeout(
                        f'step "{name}" did not return within its timeout of {limit:g}s; it was cancelled'
                    )
        finally:
            if not task.done():  # let the body's own cleanup (except CancelledError, finally) run, for a while
                task.cancel()
                await asyncio.wait({task}, timeout=CANCEL_GRACE)


class _Decision:
    """What ``ctx.patched`` returns in an async workflow: its answer once awaited.
    Tested for truth unawaited it would always be true, taking the new branch in
    runs that passed the patch on the old code: that fails the run at once instead."""

    def __init__(self, change_id: str, decision: Coroutine[Any, Any, bool]) -> None:
        self._change_id, self._decision = change_id, decision

    def __await__(self) -> Generator[Any, None, bool]:
        return self._decision.__await__()

    def __bool__(self) -> bool:
        self._decision.close()  # never awaited: no "coroutine was never awaited" warning
        raise PermanentError(
            f"ctx.patched({self._change_id!r}) was used without await: in an async workflow write "
            f"`if await ctx.patched({self._change_id!r}):`"
        )
