"""The benchmark's worker processes: real ``runworkers`` processes on a scratch
database, started and stopped around the measurements."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .scratch import ScratchDatabase

#: Processes started at a time, each wave once the one before has connected.
START_WAVE = 5
#: Seconds a wave may go without one more connection before the start fails.
START_TIMEOUT = 60.0


class Workers:
    """``processes`` real ``runworkers`` processes on a scratch database."""

    def __init__(
        self, database: ScratchDatabase, processes: int, threads: int, args: list[str], log_dir: Path, label: str
    ) -> None:
        self.database = database
        self.count = processes
        self.command = [
            sys.executable,
            "-m",
            "project.benchmark.worker_process",
            database.source_alias,
            database.name,
            "--concurrency",
            str(threads),
            *args,
        ]
        self.log_dir = log_dir
        self.label = label
        self.processes: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Workers:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": import_path()}
        try:
            # In waves of a few at a time: thirty Django processes importing at
            # once on two cores each take a minute or more to connect.
            for first in range(0, self.count, START_WAVE):
                for n in range(first, min(self.count, first + START_WAVE)):
                    log = open(self.log_dir / f"{self.label}-{n + 1}.log", "ab")
                    self.processes.append(subprocess.Popen(self.command, env=env, stdout=log, stderr=subprocess.STDOUT))
                    log.close()
                self._wait_ready()
        except BaseException:
            self.__exit__()  # no process outlives the run
            raise
        time.sleep(0.5)  # the listeners have checked that notifications arrive
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _wait_ready(self) -> None:
        """Until every process started has registered its row and holds its
        listener's connection and a thread's. Not every thread's: a thread
        connects at its first claim, and when the first claim finds the queue
        empty the threads that asked with it idle without ever connecting. The
        deadline moves on while more connect, so a loaded machine only makes it
        slower."""
        pids = [process.pid for process in self.processes]
        query = (
            "SELECT (SELECT count(*) FROM workflow_workers WHERE pid = ANY(%s) AND gone_at IS NULL),"
            " (SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend') - 1"
        )  # less 1: this query's own connection
        seen, deadline = (-1, -1), 0.0
        while True:
            registered, connected = self.database.one(query, [pids, self.database.name])
            if registered >= len(pids) and connected >= 2 * len(pids):
                return
            if (registered, connected) > seen:
                seen, deadline = (registered, connected), time.monotonic() + START_TIMEOUT
            if any(process.poll() is not None for process in self.processes) or time.monotonic() > deadline:
                raise RuntimeError(
                    f"runworkers did not start ({registered} of {len(pids)} processes registered,"
                    f" {connected} of at least {2 * len(pids)} connections); see {self.log_dir}"
                )
            time.sleep(0.05)

    def peak_rss_mb(self) -> list[float]:
        return self._status_mb("VmHWM:")

    def rss_mb(self) -> list[float]:
        return self._status_mb("VmRSS:")

    def restart_peaks(self) -> list[float]:
        """Make each process's peak RSS its RSS now (Linux's ``clear_refs``), so
        that the next reading of the peak is that of what ran since; returns the
        peaks before (what ``peak_rss_mb`` read). A peak that cannot be restarted
        (not Linux, not allowed) is left: the next reading is then a peak of
        the whole life, as before."""
        before = self.peak_rss_mb()
        for process in self.processes:
            with contextlib.suppress(OSError):
                Path(f"/proc/{process.pid}/clear_refs").write_text("5")
        return before

    def _status_mb(self, field: str) -> list[float]:
        values = []
        for process in self.processes:
            with contextlib.suppress(OSError):
                status = Path(f"/proc/{process.pid}/status").read_text()
                kilobytes = next(int(line.split()[1]) for line in status.splitlines() if line.startswith(field))
                values.append(kilobytes / 1024)
        return values


def import_path() -> str:
    """This process's first import directory (manage.py's, or ``--pythonpath``)
    ahead of any inherited PYTHONPATH: ``python -m`` starts from the working
    directory only, and must find the same settings module."""
    first = os.path.abspath(sys.path[0] or os.curdir)
    return os.pathsep.join(path for path in (first, os.environ.get("PYTHONPATH")) if path)
