"""CPU time spent by the worker processes and by PostgreSQL during a drain,
read from ``/proc/<pid>/stat`` (user + system time of every thread).

PostgreSQL's share is the CPU of the backends serving the scratch database,
which exist only when the server runs on this machine; otherwise it is n/a.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

import psycopg

BACKENDS = "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (all its threads), or None when it is not visible here."""
    fields = _stat_fields(pid)
    # utime and stime: the 14th and 15th fields
    return None if fields is None else (int(fields[11]) + int(fields[12])) / _TICKS


def server_backends(conninfo: str) -> list[int] | None:
    """The pids of the backends connected to this database, if they are processes
    of this machine (a PostgreSQL elsewhere: None)."""
    with psycopg.connect(conninfo, autocommit=True) as conn:
        pids = [row[0] for row in conn.execute(BACKENDS)]
        # Looked up while the connection holds its backend: once closed, the process may be gone.
        with contextlib.suppress(OSError):
            if Path(f"/proc/{conn.info.backend_pid}/comm").read_text().startswith("postgres"):
                return pids
    return None


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command's name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


class ServerCpu:
    """CPU seconds of a PostgreSQL on this machine since this was made: of
    every process of the server, backends that connected meanwhile included,
    and through the postmaster's count of its children that ended (cutime and
    cstime), of those that exited meanwhile. Where backends come and go (a
    pool, a worker that reconnects), counting the backends seen at the start
    misses them; this misses nothing, so it is a figure for a server that
    serves nothing else. None when the server is not a process of this machine."""

    def __init__(self, conninfo: str) -> None:
        backends = server_backends(conninfo)
        fields = _stat_fields(backends[0]) if backends else None
        self._postmaster = int(fields[1]) if fields else None  # a backend's parent
        self._start = self._total()

    def _total(self) -> float | None:
        if self._postmaster is None:
            return None
        postmaster = _stat_fields(self._postmaster)
        if postmaster is None:
            return None
        ticks = sum(int(value) for value in postmaster[11:15])  # its own time, and its ended children's
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and (fields := _stat_fields(entry.name)) and fields[1] == str(self._postmaster):
                ticks += int(fields[11]) + int(fields[12])
        return ticks / _TICKS

    def used(self) -> float | None:
        now = self._total()
        return None if now is None or self._start is None else now - self._start


class CpuMeter:
    """CPU seconds of ``workers`` and of ``backends`` (None: n/a) since it was made.
    A process that exits meanwhile is left out of both readings."""

    def __init__(self, workers: Iterable[int], backends: Iterable[int] | None) -> None:
        self._workers = {pid: cpu_seconds(pid) for pid in workers}
        self._backends = None if backends is None else {pid: cpu_seconds(pid) for pid in backends}

    def used(self) -> tuple[float, float | None]:
        """CPU seconds used so far by the workers, and by the backends (None: n/a)."""
        server = None if self._backends is None else _used(self._backends)
        return _used(self._workers), server


def _used(before: dict[int, float | None]) -> float:
    total = 0.0
    for pid, start in before.items():
        now = cpu_seconds(pid)
        if start is not None and now is not None:
            total += now - start
    return total
