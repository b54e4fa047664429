"""A step body under a time limit: run in a thread of its own, which the worker
stops waiting for at the limit.

Python cannot stop a thread from outside (it has no safe way to raise in
another thread, and none at all inside a C call): a body past its limit is
abandoned, not killed. It runs on in its daemon thread until it ends (its
result or error is then dropped) or the process exits; the worker thread is
given back at once.

What an abandoned body holds of the database is taken back at once: the
worker cancels the query it is running and shuts its connections' sockets,
so the server ends their sessions, and no new connection is made for it
(``_Body.abandon``). The body's next query, or the one it waits on, fails
inside the body with ``OperationalError``. Its thread, its memory and
anything else it holds stay until it ends; the process counts the abandoned
bodies still running (``abandoned_bodies``), and ``runworkers`` restarts
itself when they reach ``MAX_ABANDONED_BODIES`` (``worker.process``).

Only a step with a limit pays for the hand-off to a thread: a step with no
timeout, in a run with no deadline, runs in the worker's thread. So does a
body whose caller holds a transaction open (a test's, run by
``orchestration.testing``): a thread of its own, on connections of its own,
would neither see the caller's uncommitted rows nor roll back with them. It
runs to its end there, and its result is dropped if it ended past its limit.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import OperationalError, connections
from psycopg import pq

from ..observability import observe

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from ..claim.lease import Flag

logger = logging.getLogger(__name__)

#: How often the worker looks at its lease (lost, cancelled, released at
#: shutdown) while it waits for a body.
_LOOK_EVERY = 0.1
#: How long the worker waits for the server to take a cancel of an abandoned
#: body's query (seconds); the socket is shut down either way.
_CANCEL_TIMEOUT = 2.0


class Expired(Exception):
    """The worker stopped waiting for a body (raised by ``call_within``)."""

    def __init__(self, why: str, abandoned: bool = True) -> None:
        super().__init__(why)
        #: ``"timeout"``, ``"deadline"`` or ``"lost"`` (the lease).
        self.why = why
        #: False: the body ran to its end in the caller's thread, past its limit (its result dropped).
        self.abandoned = abandoned


class _Body:
    """``fn(*args, **kwargs)`` in a daemon thread, in a copy of the caller's
    context (contextvars); its result or exception is kept for the caller."""

    def __init__(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str, what: str
    ) -> None:
        self.done = threading.Event()
        self.abandoned = False
        #: The run and step, for the log lines about it.
        self.what = what
        self._call = (fn, args, kwargs)
        self._context = contextvars.copy_context()
        self._result: Any = None
        self._error: BaseException | None = None
        self._started = time.monotonic()
        #: The body thread's own connection wrappers (Django's are per thread), set before ``fn`` runs.
        self._databases: list[BaseDatabaseWrapper] = []
        self._databases_ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        fn, args, kwargs = self._call
        try:
            self._databases = thread_databases()
            self._databases_ready.set()
            self._result = self._context.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the worker thread, which decides
            self._error = exc
        finally:
            self._databases_ready.set()
            connections.close_all()  # this thread's own connections
            with _abandoned_lock:
                self.done.set()
                ended_abandoned = _abandoned.pop(self, None) is not None
                left = len(_abandoned)
            if ended_abandoned:
                observe.abandoned_bodies(left)
                logger.warning(
                    "%s: the abandoned body ended after %.1fs; its outcome is dropped",
                    self.what,
                    time.monotonic() - self._started,
                )

    def outcome(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result

    def abandon(self) -> None:
        """Stop waiting for the body: count it while it runs on, and take back
        its database connections (see the module's docstring)."""
        with _abandoned_lock:
            if self.done.is_set():
                return
            self.abandoned = True
            _abandoned[self] = None
            held = len(_abandoned)
        observe.abandoned_bodies(held)
        self._databases_ready.wait()
        for database in self._databases:
            _cut_off(database, self.what)


def thread_databases() -> list[BaseDatabaseWrapper]:
    """The calling thread's connection wrappers (Django's are per thread), one a
    database alias, made now if need be, unconnected: another thread that holds
    them can later end what this thread does with them, as no other can reach them."""
    return [connections[alias] for alias in connections]


def _query_running(database: BaseDatabaseWrapper) -> bool:
    """Whether a query runs now on ``database`` (another thread's, may be)."""
    raw = database.connection
    try:
        return raw is not None and raw.info.transaction_status == pq.TransactionStatus.ACTIVE
    except Exception:  # broken or closed meanwhile
        return False


def cancel_query(database: BaseDatabaseWrapper) -> None:
    """Cancel the query another thread runs now on ``database``, if any: a
    query waiting on a lock or a slow plan would hold its server session for
    as long as it runs, whatever becomes of the client."""
    if _query_running(database):
        with contextlib.suppress(Exception):  # ended or broken meanwhile
            database.connection.cancel_safe(timeout=_CANCEL_TIMEOUT)


def _cut_off(database: BaseDatabaseWrapper, what: str) -> None:
    """End the server session of another thread's connection, safely while that
    thread uses it: the query in flight is cancelled and the socket shut down,
    never closed (that thread's own ``close`` frees it: closing it here could
    free what that thread is reading), and it opens no new one."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError(
            f"{what}: this step body was abandoned (past its timeout, the run's deadline, or no longer held); "
            "its database connections are closed"
        )

    # An instance attribute: only this thread's wrapper refuses, not the class.
    database.get_new_connection = refuse  # type: ignore[method-assign]
    cancel_query(database)
    raw = database.connection
    if raw is None:
        return
    with contextlib.suppress(Exception):
        shutting = socket.socket(fileno=raw.fileno())
        try:
            shutting.shutdown(socket.SHUT_RDWR)
        finally:
            shutting.detach()  # the descriptor stays the connection's, closed by its thread


#: The abandoned bodies still running in this process (a dict: ordered, the last abandoned last).
_abandoned: dict[_Body, None] = {}
_abandoned_lock = threading.Lock()


def abandoned_bodies() -> list[str]:
    """The run and step of each abandoned body still running in this process, the last abandoned last."""
    with _abandoned_lock:
        return [body.what for body in _abandoned]


def call_within(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    timeout: float | None,
    deadline: float | None,
    lost: Flag,
    thread_name: str,
    what: str = "a step body",
) -> Any:
    """Return ``fn(*args, **kwargs)``, run in a thread of its own. Stop waiting
    for it, leaving it running without its database connections, and raise
    ``Expired`` once ``timeout`` seconds have passed, at ``deadline`` (a
    ``time.monotonic()`` value), or as soon as ``lost`` is set. ``what`` names
    the run and step in the log."""
    ends_at = min(
        time.monotonic() + timeout if timeout is not None else math.inf,
        deadline if deadline is not None else math.inf,
    )
    if any(database.in_atomic_block for database in connections.all(initialized_only=True)):
        result = fn(*args, **kwargs)
        if time.monotonic() >= ends_at:
            raise Expired("deadline" if deadline is not None and deadline <= ends_at else "timeout", abandoned=False)
        return result
    body = _Body(fn, args, kwargs, thread_name, what)
    body.thread.start()
    while not body.done.wait(max(0.0, min(_LOOK_EVERY, ends_at - time.monotonic()))):
        why = None
        if lost.is_set():
            why = "lost"
        elif time.monotonic() >= ends_at:
            why = "deadline" if deadline is not None and deadline <= ends_at else "timeout"
        if why is not None:
            body.abandon()
            raise Expired(why)
    return body.outcome()
