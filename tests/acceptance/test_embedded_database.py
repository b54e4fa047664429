"""The example project's embedded PostgreSQL (pgserver) stops with the last
process that uses it, even when another one died without its exit handlers
(SIGKILL, os._exit): ``make serve`` stopped leaves no orphaned server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytest.importorskip("pgserver")

JOIN = "from pathlib import Path; from project.embedded_db import embedded_database; embedded_database(Path({!r}))"


def join(data_dir: Path, then: str = "") -> subprocess.Popen[str]:
    """A process that starts (or joins) the server in ``data_dir``, then runs ``then``."""
    code = f"{JOIN.format(str(data_dir))}\n{then}"
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, text=True, **pipes)


def postmaster(data_dir: Path) -> int | None:
    """The pid of the server running in ``data_dir``, or None (pg_ctl removes postmaster.pid as it stops)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, IndexError, ValueError, ProcessLookupError):
        return None
    return pid


@pytest.fixture
def data_dir(tmp_path):
    """A data directory of its own; a server the test left running is stopped."""
    data_dir = tmp_path / "pgdata"
    yield data_dir
    left = postmaster(data_dir)
    if left is not None:
        os.kill(left, signal.SIGTERM)


def test_the_server_stops_with_the_last_live_process_though_another_died_without_exit_handlers(data_dir):
    assert join(data_dir, "import os; os._exit(0)").wait(60) == 0  # its pid stays in pgserver's list
    holder = join(data_dir, "import sys; print('joined', flush=True); sys.stdin.read()")  # still using it
    try:
        assert holder.stdout.readline() == "joined\n"
        assert join(data_dir).wait(60) == 0
        assert postmaster(data_dir) is not None, "a process that still uses the server must keep it"
    finally:
        holder.communicate("", timeout=60)
    assert postmaster(data_dir) is None, "the last live process to exit must stop the server"
