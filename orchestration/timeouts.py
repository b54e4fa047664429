"""A step body under a time limit: run in a thread of its own, which the worker
stops waiting for at the limit.

Python cannot stop a thread from outside (it has no safe way to raise in
another thread, and none at all inside a C call): a body past its limit is
abandoned, not killed. It runs on in its daemon thread until it ends (its
result or error is then dropped) or the process exits; the worker thread is
given back at once. A body that waits on I/O with a timeout of its own (a
socket, an HTTP client, a database ``statement_timeout``) ends by itself; one
in a busy loop or a C call that never returns holds its thread, its memory and
any connection it opened until the process ends.

Only a step with a limit pays for the hand-off to a thread: a step with no
timeout, in a run with no deadline, runs in the worker's thread.
"""

from __future__ import annotations

import contextvars
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import connections

if TYPE_CHECKING:
    from .lease import Flag

logger = logging.getLogger(__name__)

#: How often the worker looks at its lease (lost, cancelled, released at
#: shutdown) while it waits for a body.
_LOOK_EVERY = 0.1


class Expired(Exception):
    """The worker stopped waiting for a body (raised by ``call_within``)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        #: ``"timeout"``, ``"deadline"`` or ``"lost"`` (the lease).
        self.why = why


class _Body:
    """``fn(*args, **kwargs)`` in a daemon thread, in a copy of the caller's
    context (contextvars); its result or exception is kept for the caller."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], name: str) -> None:
        self.done = threading.Event()
        self.abandoned = False
        self._call = (fn, args, kwargs)
        self._context = contextvars.copy_context()
        self._result: Any = None
        self._error: BaseException | None = None
        self._started = time.monotonic()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        fn, args, kwargs = self._call
        try:
            self._result = self._context.run(fn, *args, **kwargs)
        except BaseException as exc:  # handed to the worker thread, which decides
            self._error = exc
        finally:
            connections.close_all()  # this thread's own connections
            self.done.set()
            if self.abandoned:
                logger.warning(
                    "%s: the abandoned step body ended after %.1fs; its outcome is dropped",
                    self.thread.name,
                    time.monotonic() - self._started,
                )

    def outcome(self) -> Any:
        if self._error is not None:
            raise self._error
        return self._result


def call_within(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    timeout: float | None,
    deadline: float | None,
    lost: Flag,
    thread_name: str,
) -> Any:
    """Return ``fn(*args, **kwargs)``, run in a thread of its own. Stop waiting
    for it, leaving it running, and raise ``Expired`` once ``timeout`` seconds
    have passed, at ``deadline`` (a ``time.monotonic()`` value), or as soon as
    ``lost`` is set."""
    body = _Body(fn, args, kwargs, thread_name)
    ends_at = min(
        time.monotonic() + timeout if timeout is not None else math.inf,
        deadline if deadline is not None else math.inf,
    )
    body.thread.start()
    while not body.done.wait(max(0.0, min(_LOOK_EVERY, ends_at - time.monotonic()))):
        why = None
        if lost.is_set():
            why = "lost"
        elif time.monotonic() >= ends_at:
            why = "deadline" if deadline is not None and deadline <= ends_at else "timeout"
        if why is not None:
            body.abandoned = True
            raise Expired(why)
    return body.outcome()
