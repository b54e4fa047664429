"""``ctx`` of an ``async def`` workflow: ``await ctx.step(...)``, with the
checkpoints, waits and guarantees of a sync workflow's.

An async run is run one of two ways. In a ``runworkers`` process it shares
the process's event loop with the other async runs (``worker.loop``), and its
engine calls run on the loop's database threads (``on_thread``), never on the
loop. Elsewhere (``execute`` called directly, or the loop full) it occupies the
calling thread: ``run`` runs it with asgiref's ``async_to_sync``, which lends
the thread back for every ``sync_to_async(thread_sensitive=True)`` call. Either
way the engine's writes are the sync context's own methods, so a step's start,
checkpoint and failure are the same fenced statements as in a sync workflow,
and the heartbeat, the sweep and crash recovery see no difference.

An ``async def`` step body runs in the loop; its timeout, the run's deadline
and a lost lease (a cancel, a reclaim) cancel it there, which a sync body in a
thread never can be; a lost lease or the deadline also cancels the workflow
function wherever it awaits (``watched``). A body cancelled while it waits in
a sync call (``sync_to_async``, as the async ORM runs its queries) leaves that
call running on its thread, which no cancel stops: the query it runs there is
cancelled too (``SyncCalls``). A sync step body runs where the
engine's calls run, as in a sync workflow (the ORM refuses to run inside an
event loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import datetime
import inspect
import logging
import time
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator, Sequence
from typing import Any

from asgiref.sync import async_to_sync, sync_to_async
from django.db import Error, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import clock
from ..claim.lease import Lease
from ..errors import ControlFlow, DeadlineExceeded, LeaseLost, PermanentError, StepTimeout
from ..observability import observe
from ..outages import is_outage
from ..validation import to_json, validate_progress, validate_step_timeout
from . import timeouts
from .context import ChildHandle, WorkflowContext

logger = logging.getLogger(__name__)

#: How often an async step body is checked for a lost lease while it runs (seconds).
LOST_CHECK_INTERVAL = 0.25
#: How long a cancelled async step body is given to finish its cleanup before the run moves on (seconds).
CANCEL_GRACE = 5.0


#: Turns a sync callable into a coroutine function that runs it off the loop, with a Django connection.
OnThread = Callable[[Callable[..., Any]], Callable[..., Coroutine[Any, Any, Any]]]


def run(function: Callable[[Any, Any], Coroutine[Any, Any, Any]], ctx: AsyncWorkflowContext, data: Any) -> Any:
    """Run an async workflow function (given an ``AsyncWorkflowContext``) to its end from the worker's thread."""
    with ctx.sync_calls.noting():
        return async_to_sync(watched)(ctx._run, function(ctx, data))


def _close_connections() -> None:
    """Close this thread's connections: its next query connects afresh."""
    with contextlib.suppress(Error):
        connections.close_all()


def lend_calling_thread(method: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``method`` run on the thread that called ``run`` (its connection)."""
    return sync_to_async(method, thread_sensitive=True)


async def watched(run: Lease, body: Coroutine[Any, Any, Any]) -> Any:
    """Await a workflow function's ``body``, cancelled if the lease is lost
    (``LeaseLost``) or the run's deadline passes (``DeadlineExceeded``) while
    it awaits anything, a step or not."""

    def passed(_: str) -> BaseException:
        return DeadlineExceeded(f"Workflow {run.id} reached its deadline.")

    return await _within(run, body, _deadline(run), passed)


@dataclasses.dataclass(frozen=True)
class _Escaped:
    exception: BaseException


async def _contained(body: Any) -> Any:
    """``await body``, with a ``SystemExit`` or ``KeyboardInterrupt`` it raises
    returned in a box: raised by a task, either stops the whole event loop
    (every run in it), not just this attempt."""
    try:
        return await body
    except (SystemExit, KeyboardInterrupt) as exc:
        return _Escaped(exc)


def cancelled(exc: BaseException) -> bool:
    """Whether ``exc`` is the cancellation of the current task (its loop is
    closing), not a ``CancelledError`` the workflow's own code raised: awaiting a
    task someone else cancelled raises one without cancelling this task."""
    task = asyncio.current_task()
    return isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() > 0


def _deadline(run: Lease) -> list[tuple[float, str]]:
    if run.deadline is None:
        return []
    return [(time.monotonic() + (run.deadline - clock.now(reread=False)).total_seconds(), "deadline")]


#: The step body whose code runs now: set in its task, seen by its sync calls,
#: which run in a copy of its context.
_step_body: contextvars.ContextVar[object | None] = contextvars.ContextVar("orchestration_step_body", default=None)


class SyncCalls:
    """The thread where async step bodies' sync calls run (``sync_to_async``
    with ``thread_sensitive``, as the async ORM's queries), and its connections.

    A cancelled body's sync call runs on to its end: its query is cancelled
    (``cancel_query_of``), so that it neither holds a server session in a lock
    wait or a slow plan nor blocks the thread's other calls (every run's, in
    the shared loop; the run's own writes, on a worker thread lent to it).
    While ``noting``, each query on the thread notes whose step body it runs
    for, so that a cancel reaches that body's query only."""

    def __init__(self, databases: Sequence[BaseDatabaseWrapper]) -> None:
        self._databases = databases
        #: By database alias: the step body whose query runs on it now.
        self._running: dict[str, object | None] = {}

    @contextlib.contextmanager
    def noting(self) -> Iterator[None]:
        """While in it, queries on the thread note their step body (a worker
        thread pays for it only while it lends itself to an async run)."""
        self.start_noting()
        try:
            yield
        finally:
            for database in self._databases:
                database.execute_wrappers.remove(self._note)

    def start_noting(self) -> None:
        for database in self._databases:
            database.execute_wrappers.append(self._note)

    def _note(self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        alias = context["connection"].alias
        self._running[alias] = _step_body.get()
        try:
            return execute(sql, params, many, context)
        finally:
            self._running[alias] = None

    def runs_query_of(self, body: object) -> bool:
        """Whether a query of ``body`` runs now."""
        return any(running is body for running in self._running.values())

    def cancel_query_of(self, body: object) -> None:
        """Cancel the query ``body`` runs now, if any (blocks: call it off the loop)."""
        for database in self._databases:
            if self._running.get(database.alias) is body:
                timeouts.cancel_query(database)


async def _as_body(marker: object, body: Any) -> Any:
    _step_body.set(marker)  # in this task's own context
    return await body


async def _within(
    run: Lease,
    body: Any,
    ends: list[tuple[float, str]],
    expired: Callable[[str], BaseException],
    sync_calls: SyncCalls | None = None,
) -> Any:
    """Await ``body``, cancelling it when the run's lease is lost (``LeaseLost``)
    or at the first of ``ends`` (``expired(why)`` is raised), and the query its
    sync call runs on ``sync_calls``' thread, if any."""
    marker = object()
    task = asyncio.ensure_future(_contained(_as_body(marker, body) if sync_calls is not None else body))
    try:
        while True:
            first = min(ends, default=None)
            wait = LOST_CHECK_INTERVAL if first is None else min(LOST_CHECK_INTERVAL, first[0] - time.monotonic())
            finished, _ = await asyncio.wait({task}, timeout=max(0.0, wait))
            if finished:
                result = task.result()
                if isinstance(result, _Escaped):
                    raise result.exception
                return result
            if run.lost.is_set():
                raise LeaseLost(f"Workflow {run.id} is no longer held by this worker.")
            if first is not None and time.monotonic() >= first[0]:
                raise expired(first[1])
    finally:
        if not task.done():  # let the body's own cleanup (except CancelledError, finally) run, for a while
            task.cancel()
            if sync_calls is not None and sync_calls.runs_query_of(marker):
                await asyncio.to_thread(sync_calls.cancel_query_of, marker)
            await asyncio.wait({task}, timeout=CANCEL_GRACE)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: the outcome is the one raised here, not the body's


class AsyncWorkflowContext(WorkflowContext):
    """Passed to an ``async def`` workflow as ``ctx``: every method of
    ``WorkflowContext`` that may wait is a coroutine here (``await ctx.step``,
    ``await ctx.sleep`` ...); the properties (``workflow_id``, ``attempt``,
    ``input`` ...) are the same."""

    def __init__(
        self,
        *args: Any,
        on_thread: OnThread = lend_calling_thread,
        sync_calls: SyncCalls | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._on_thread = on_thread
        #: Where the step bodies' sync calls run: by default the calling thread, lent by ``lend_calling_thread``.
        self.sync_calls = sync_calls or SyncCalls(timeouts.thread_databases())
        #: The progress write running in the background, if any (``set_progress``).
        self._progress_write: asyncio.Task[None] | None = None

    def set_progress(self, details: dict[str, Any]) -> None:
        """``WorkflowContext.set_progress`` (not awaited). In the loop, a write
        that is due runs on the engine's thread in the background, one at a time;
        a report made meanwhile waits for the next."""
        value = validate_progress(details)
        if not self._run.note_progress(value):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a sync step body, off the loop
            self._run.write_progress()
            return
        if self._progress_write is None or self._progress_write.done():
            self._progress_write = loop.create_task(self._write_progress())

    async def _write_progress(self) -> None:
        try:
            await self._on_thread(self._run.write_progress)()
        except LeaseLost:
            pass  # the lease's ``lost`` is set: the run's watch ends it
        except Exception as exc:  # the report is kept, written by the next step boundary
            logger.warning("workflow %s: writing its progress failed: %s", self._run.id, exc)

    def patched(self, change_id: str) -> _Decision:  # type: ignore[override]
        """``WorkflowContext.patched``, awaited: ``if await ctx.patched("id"):``.
        The first decision records the patch, a write made on the worker's thread."""
        return _Decision(change_id, self._on_thread(super().patched)(change_id))

    async def deprecate_patch(self, change_id: str) -> None:  # type: ignore[override]
        """``WorkflowContext.deprecate_patch``, awaited."""
        await self._on_thread(super().deprecate_patch)(change_id)

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
        loop) or a plain function (run where the engine's calls run: off the loop)."""
        if not inspect.iscoroutinefunction(fn):
            return await self._on_thread(super().step)(name, fn, *args, timeout=timeout, **kwargs)
        with observe.step_report(self, name) or contextlib.nullcontext():  # as the sync step's decorator reports
            return await self._async_step(name, fn, args, kwargs, timeout)

    async def _async_step(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, timeout: float | datetime.timedelta | None
    ) -> Any:
        limit = self._step_timeout if timeout is None else validate_step_timeout(timeout, f"ctx.step({name!r}) timeout")
        number, done, output = await self._on_thread(self._begin)(name, True)
        if done:
            return output
        started = time.monotonic()
        try:
            result = await self._within(number, name, limit, fn(*args, **kwargs))
            output, encoded = to_json(result, lambda: f"The result of step {number} {name!r}")
        except ControlFlow:
            raise
        except BaseException as exc:
            if cancelled(exc):  # the run itself was cancelled (its process is closing): nothing more is written
                raise
            await self._on_thread(self._record_step_failure)(number, name, exc, started)
            if is_outage(exc):
                # The body's queries (the async ORM's) ran on asgiref's thread, whose
                # broken connection nothing else replaces: every retry would fail on it.
                await sync_to_async(_close_connections, thread_sensitive=True)()
            raise
        self._run.defer_checkpoint(number, name, encoded)
        self._completed(number, name, output, started)
        return output

    async def atomic_step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``WorkflowContext.atomic_step``: ``fn`` (a plain function) runs on the
        thread of the engine's calls inside ``transaction.atomic()`` with its checkpoint."""
        return await self._on_thread(super().atomic_step)(name, fn, *args, **kwargs)

    async def sleep(self, name: str, duration: float | datetime.timedelta) -> None:  # type: ignore[override]
        """``WorkflowContext.sleep``: a durable timer; the run is released while it waits."""
        await self._on_thread(super().sleep)(name, duration)

    async def wait_for_event(self, name: str, timeout: float | datetime.timedelta | None = None) -> Any:
        """``WorkflowContext.wait_for_event``."""
        return await self._on_thread(super().wait_for_event)(name, timeout)

    async def start_child(self, workflow_type: str, input_data: Any = None, **options: Any) -> ChildHandle:  # type: ignore[override]
        """``WorkflowContext.start_child``."""
        return await self._on_thread(super().start_child)(workflow_type, input_data, **options)

    async def start_children(  # type: ignore[override]
        self, workflow_type: str, inputs: Iterable[Any], **options: Any
    ) -> list[ChildHandle]:
        """``WorkflowContext.start_children``."""
        return await self._on_thread(super().start_children)(workflow_type, inputs, **options)

    async def wait_for(  # type: ignore[override]
        self, handles: Sequence[ChildHandle], *, return_exceptions: bool = False
    ) -> list[Any]:
        """``WorkflowContext.wait_for``."""
        return await self._on_thread(super().wait_for)(handles, return_exceptions=return_exceptions)

    async def _within(self, number: int, name: str, limit: float | None, body: Any) -> Any:
        """Await ``body``, cancelling it at the step's ``limit`` (``StepTimeout``),
        the run's deadline (``DeadlineExceeded``) or a lost lease (``LeaseLost``)."""
        run = self._run
        ends = [(time.monotonic() + limit, "timeout")] if limit is not None else []

        def expired(why: str) -> BaseException:
            if why == "deadline":
                return DeadlineExceeded(f'Workflow {run.id} reached its deadline during step {number} "{name}".')
            return StepTimeout(f'step "{name}" did not return within its timeout of {limit:g}s; it was cancelled')

        return await _within(run, body, ends + _deadline(run), expired, self.sync_calls)


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
