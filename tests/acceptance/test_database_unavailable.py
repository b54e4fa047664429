"""The commands against a database that is not there: a burst gives up after a
bounded time, a long-running worker keeps trying, and ``migrate`` and
``workflows`` say in one line which database and why, without a traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from tests.acceptance.test_runworkers import wait_for
from tests.support import ROOT, run_burst, run_manage, runworkers_command, start_workers, worker_env

PASSWORD = "not-to-be-printed"


def nowhere_env() -> tuple[dict[str, str], str]:
    """The environment of a process whose database no server listens for, and
    that database as the messages name it."""
    with socket.socket() as probe:  # a port free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = worker_env(DATABASE_URL=f"postgres://postgres:{PASSWORD}@127.0.0.1:{port}/orders")
    del env["DATABASE_NAME"]
    return env, f"127.0.0.1:{port}/orders"


@pytest.fixture
def nowhere() -> tuple[dict[str, str], str]:
    return nowhere_env()


class TimedBurst:
    """A ``runworkers --burst`` process, and how long it ran (timed by a thread
    of its own, so that a test reading it late does not lengthen it)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.began = time.monotonic()
        self.process = subprocess.Popen(
            runworkers_command("--burst"),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.took: float | None = None
        self.stderr = ""
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        _, self.stderr = self.process.communicate()
        self.took = time.monotonic() - self.began

    def join(self, timeout: float) -> None:
        self._waiter.join(timeout)


@pytest.fixture(scope="module", autouse=True)
def burst_with_the_default_give_up() -> Iterator[TimedBurst]:
    """A burst given no ``--give-up-after``, started with the module: its 30 s
    of trying pass while the module's other tests run."""
    burst = TimedBurst(nowhere_env()[0])
    yield burst
    if burst.process.poll() is None:
        burst.process.kill()
    burst.join(timeout=10)


def test_burst__gives_up_on_a_database_that_is_not_there_with_one_line_and_status_3(nowhere):
    env, database = nowhere
    began = time.monotonic()
    result = run_burst("--give-up-after", "2", env=env, timeout=60)
    assert result.returncode == 3 and time.monotonic() - began < 20, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"CommandError: runworkers gave up after 2s: database {database} (alias 'default') is ")
    assert "Connection refused" in last and "Traceback" not in result.stderr and PASSWORD not in result.stderr
    assert result.stderr.count("is unavailable") <= 3  # the first, the give-up, the exit: not a line per try


def test_long_running_worker__keeps_trying_a_database_that_is_not_there(nowhere, workers):
    env, _ = nowhere
    began = time.monotonic()
    process = start_workers("--concurrency", "1", env=env)
    workers.append(process)
    # Its SIGTERM handler is in place once it meets the outage, however long a loaded machine takes to start it.
    assert wait_for(lambda: "retrying every" in process.log_path.read_text(), timeout=60)
    time.sleep(max(1.0, 4 - (time.monotonic() - began)))
    assert process.poll() is None, process.log_path.read_text()
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0


@pytest.mark.parametrize("command", [["migrate"], ["workflows", "list"], ["workflows", "workers"], ["workflow_stats"]])
def test_command__says_in_one_line_which_database_is_unavailable_and_why(nowhere, command):
    env, database = nowhere
    result: subprocess.CompletedProcess[str] = run_manage(*command, env=env, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"CommandError: database {database} (alias 'default') is unavailable: connection failed: connection to "
        f'server at "127.0.0.1", port {database.split(":")[1].split("/")[0]} failed: Connection refused'
    ]


def test_burst__gives_up_after_30s_by_default(burst_with_the_default_give_up):
    burst = burst_with_the_default_give_up
    burst.join(timeout=90)
    took = burst.took
    assert burst.process.returncode == 3 and took is not None and 30 <= took < 60, (took, burst.stderr)
    assert "runworkers gave up after 30s" in burst.stderr.strip().splitlines()[-1]
