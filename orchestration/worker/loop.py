"""The event loop a ``runworkers`` process shares among its async runs.

A worker thread that claims an async run hands it to the loop (``take``) and
goes back to claiming at once: the loop holds up to ``capacity`` runs, which
await their I/O side by side, apart from the threads (``--concurrency``). The
claim cannot tell an async run from a sync one before it is claimed, so a
thread that claims one while the loop is full runs it itself, as a sync run
(``async_context.run``): a process holds at most ``capacity`` async runs in
the loop and one a thread besides.

The loop never queries. Every engine call of its runs (the fenced writes of
``lease``: a step's start, its checkpoint, a wait, the outcome) and every sync
step body runs on one of its ``DatabaseThreads``, each with its own connection.
A run in the loop is held like a thread's (``HeldRuns``): the process's
heartbeat renews it and marks it lost, which cancels it wherever it awaits;
on shutdown it stops at its next step boundary, or is released with the rest
when the grace period ends, as a thread's run is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from ..claim.lease import Lease, OutagePolicy
from ..ctx.async_context import CANCEL_GRACE, SyncCalls
from ..ctx.timeouts import thread_databases
from ..registry import async_workflow_types
from .dispatch import Dispatcher
from .execution import Outcome, execute_async

logger = logging.getLogger(__name__)

#: Threads that run the loop's engine calls and sync step bodies (a sync step
#: body holds one while it runs).
DATABASE_THREADS = 4
#: How often the idle loop looks whether it may close (seconds).
CLOSE_CHECK_INTERVAL = 0.05


class DatabaseThreads:
    """A few threads, each with its own Django connection, that run sync calls for the loop."""

    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[tuple[concurrent.futures.Future[Any], Callable[[], Any]] | None]
        self._jobs = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True) for n in range(1, size + 1)
        ]
        for thread in self._threads:
            thread.start()

    def __call__(self, method: Callable[..., Any]) -> Callable[..., Coroutine[Any, Any, Any]]:
        """``method`` as a coroutine function that runs it on one of these threads."""

        async def call(*args: Any, **kwargs: Any) -> Any:
            job = functools.partial(contextvars.copy_context().run, method, *args, **kwargs)
            done: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._jobs.put((done, job))
            result = asyncio.wrap_future(done)
            try:
                return await asyncio.shield(result)
            except asyncio.CancelledError:
                # A write in flight ends before the run moves on: its next
                # write (the outcome) must not race it on the same lease.
                await asyncio.wait({result})
                raise

        return call

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)
        for thread in self._threads:
            thread.join(timeout=5)

    def _serve(self) -> None:
        try:
            while (item := self._jobs.get()) is not None:
                done, job = item
                if not done.set_running_or_notify_cancel():
                    continue
                try:
                    done.set_result(job())
                except BaseException as exc:  # LeaseLost and the other control flow too: the caller's to handle
                    done.set_exception(exc)
        finally:
            connections.close_all()


class SharedLoop:
    """One thread running an event loop, holding up to ``capacity`` async runs of a process."""

    def __init__(
        self,
        capacity: int,
        dispatcher: Dispatcher,
        *,
        should_release: Callable[[], bool],
        outage: OutagePolicy,
        on_death: Callable[[str], None],
    ) -> None:
        self.capacity = capacity
        self.dispatcher = dispatcher
        self._should_release = should_release
        self._outage = outage
        self._on_death = on_death
        #: Read once: a sync run pays one set look-up here.
        self._async_types = async_workflow_types()
        self._loop = asyncio.new_event_loop()
        self._database = DatabaseThreads(DATABASE_THREADS, "orchestration-async-db")
        #: asgiref's thread, where the runs' step bodies' sync calls run (their async ORM queries).
        self._sync_calls = SyncCalls(self._loop.run_until_complete(sync_to_async(thread_databases)()))
        self._sync_calls.start_noting()  # the thread serves only the loop's runs
        self._lock = threading.Lock()
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = threading.Event()
        #: Set once the runs left were released: they are cancelled, to write nothing more.
        self._abandon = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="orchestration-async-loop", daemon=True)

    @property
    def running(self) -> int:
        """The async runs in the loop now."""
        with self._lock:
            return self._running

    def start(self) -> None:
        self.thread.start()

    def take(self, run: Lease) -> bool:
        """Start ``run`` in the loop, if it is an async workflow and the loop
        has room; False: the calling thread runs it."""
        if run.workflow_type not in self._async_types:
            return False
        with self._lock:
            if self._running >= self.capacity or self._closing.is_set():
                return False
            self._running += 1
        self.dispatcher.held.add(run)
        run.outage = self._outage
        self._loop.call_soon_threadsafe(self._start, run)
        return True

    def close_when_idle(self) -> None:
        """Let the loop's thread end once no run is left in it (the threads have stopped)."""
        self._closing.set()

    def close(self) -> None:
        """End the loop's thread (the runs left in it were released) and its database threads."""
        self._closing.set()
        self._abandon.set()
        self.thread.join(timeout=CANCEL_GRACE + 1)
        self._database.close()

    def _serve(self) -> None:
        try:
            self._loop.run_until_complete(self._until_closed())
        except BaseException:
            self._on_death(threading.current_thread().name)
        finally:
            self._loop.close()

    async def _until_closed(self) -> None:
        while not (self._closing.is_set() and self.running == 0) and not self._abandon.is_set():
            await asyncio.sleep(CLOSE_CHECK_INTERVAL)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=CANCEL_GRACE)

    def _start(self, run: Lease) -> None:
        task = self._loop.create_task(self._attempt(run), name=f"workflow {run.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _attempt(self, run: Lease) -> None:
        outcome = Outcome.ABANDONED
        started = time.monotonic()
        try:
            outcome = await execute_async(
                run, on_thread=self._database, sync_calls=self._sync_calls, should_release=self._should_release
            )
        except asyncio.CancelledError:
            pass
        except BaseException:
            # Not even a bug here may stop the loop; the run is reclaimed as stuck if its outcome was not written.
            logger.exception("workflow %s: unexpected error in the worker's event loop", run.id)
        finally:
            self.dispatcher.held.discard(run)
            self.dispatcher.note_run(outcome, time.monotonic() - started, average=False)
            with self._lock:
                self._running -= 1
