"""A ``runworkers`` process that replaces itself: at its cap of abandoned step
bodies (``MAX_ABANDONED_BODIES``) it stops as on SIGTERM, then executes the
same command again in the same process (``os.execv``), so the operating system
takes back the threads of the bodies it could not stop, their memory and
whatever else they hold, with no supervisor involved.

Across the exec the pid stays, so a supervisor sees one process that never
exited; every file descriptor Python and libpq open is close-on-exec (the
sockets of the database and of ``--metrics-port`` among them), a signal
that arrives before the exec makes the process exit instead (its handlers
stay until then), and the new process registers a new worker row (the old one was deleted when
it stopped). The restarts so far are carried in the environment, so the
restart counter goes on counting.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from ..observability import observe

logger = logging.getLogger(__name__)

#: The environment variable that carries the restarts of this process so far across the exec.
RESTARTS_VARIABLE = "ORCHESTRATION_WORKER_RESTARTS"


def restarts_so_far() -> int:
    """How many times this process restarted itself before (0 when started by its supervisor)."""
    try:
        return max(0, int(os.environ.get(RESTARTS_VARIABLE, "0")))
    except ValueError:
        return 0


def count_restarts_so_far() -> None:
    """Carry the restarts of the processes this one replaced into its counter
    (in multiprocess mode the counter's file, kept by pid, carries them already)."""
    before = restarts_so_far()
    if before and not observe.shared_between_processes():
        observe.restarted(before)


def command_line() -> list[str]:
    """The command this process was started with, interpreter options and ``-m`` included."""
    original = sys.orig_argv[1:] if sys.orig_argv else sys.argv
    return [sys.executable, *original]


def replace_process(wanted: Callable[[], bool]) -> None:
    """Execute this process's command again in its place, unless ``wanted()``
    turns false first (a signal asked the process to stop); returns only then.
    Call it once every thread that writes to the database has stopped."""
    if not wanted():
        return
    observe.restarted()
    env = {**os.environ, RESTARTS_VARIABLE: str(restarts_so_far() + 1)}
    argv = command_line()
    logger.warning("restarting: %s", " ".join(argv))
    logging.shutdown()  # the exec keeps no buffer: write out what is logged
    sys.stdout.flush()
    sys.stderr.flush()
    if wanted():
        os.execve(sys.executable, argv, env)
