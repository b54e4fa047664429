"""``runworkers`` under a systemd ``Type=notify`` unit: the readiness, watchdog
and stopping messages, read from a datagram socket the test opens where
systemd would (``NOTIFY_SOCKET``)."""

from __future__ import annotations

import io
import os
import signal
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from orchestration import start_workflow
from orchestration.models import Workflow, WorkflowStatus, WorkflowWorker
from orchestration.worker import systemd
from tests.acceptance.test_runworkers import wait_for
from tests.support import WorkerProcess, start_workers, worker_env
from tests.testapp.models import StepRun


@pytest.fixture
def notify_socket() -> Iterator[socket.socket]:
    """A datagram socket bound where ``NOTIFY_SOCKET`` says, as systemd binds it."""
    with tempfile.TemporaryDirectory(prefix="notify-") as folder:
        path = str(Path(folder) / "notify")
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)
            sock.settimeout(30)
            yield sock


def messages_until(sock: socket.socket, wanted: str, timeout: float = 30) -> list[str]:
    """The datagrams received, up to and with the first that has the line ``wanted``."""
    received: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        message = sock.recv(4096).decode()
        received.append(message)
        if wanted in message.splitlines():
            return received
    raise AssertionError(f"no {wanted} in {received}")


def test_notify__sends_its_lines_in_one_datagram(notify_socket, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.getsockname())
    assert systemd.notify("READY=1", "STATUS=claiming")
    assert notify_socket.recv(4096) == b"READY=1\nSTATUS=claiming"


def test_notify__to_an_abstract_socket__sends_there(monkeypatch):
    name = f"orchestration-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        monkeypatch.setenv("NOTIFY_SOCKET", "@" + name)
        assert systemd.notify("WATCHDOG=1")
        assert sock.recv(4096) == b"WATCHDOG=1"


def test_notify__without_notify_socket__does_nothing(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert systemd.notify("READY=1") is False


def test_notify__to_a_socket_nobody_reads__says_false_and_never_raises(monkeypatch, tmp_path):
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody"))
    assert systemd.notify("READY=1") is False


def test_watchdog_seconds__for_another_process__is_none(notify_socket, monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", notify_socket.getsockname())
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    assert systemd.watchdog_seconds() == 3.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert systemd.watchdog_seconds() is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.serial  # the probe must come while a 5 s step still runs
def test_runworkers__under_type_notify__says_ready_feeds_the_watchdog_and_says_stopping(notify_socket):
    env = worker_env(NOTIFY_SOCKET=notify_socket.getsockname(), WATCHDOG_USEC="5000000")  # heartbeat every 1 s
    worker = start_workers("--concurrency", "1", env=env)
    try:
        ready = messages_until(notify_socket, "READY=1")[-1].splitlines()
        assert f"MAINPID={worker.pid}" in ready
        assert "STATUS=claiming, 1 threads, queues all" in ready
        messages_until(notify_socket, "WATCHDOG=1", timeout=10)
        run = start_workflow("slow", {"seconds": 5, "steps": 1})
        # Its step's body runs in this process (it records its pid, then sleeps).
        assert wait_for(lambda: StepRun.objects.filter(workflow_id=run.pk).exists(), timeout=30), log_of(worker)
        assert StepRun.objects.get(workflow_id=run.pk).pid == worker.pid, log_of(worker)
        worker.send_signal(signal.SIGTERM)
        messages_until(notify_socket, "STOPPING=1", timeout=10)
        # Still finishing its step: its row says it is stopping, and so does the probe.
        assert wait_for(
            lambda: WorkflowWorker.objects.filter(pid=worker.pid, stopping_since__isnull=False).exists(), timeout=5
        ), log_of(worker)
        row = WorkflowWorker.objects.get(pid=worker.pid)
        # Probed in this process: a probe process of its own may start after the step ended, on a loaded machine.
        probed = io.StringIO()
        with pytest.raises(CommandError) as unhealthy:
            call_command("workflows", "health", "--worker", row.pk, stdout=probed)
        assert unhealthy.value.returncode == 1
        assert f"FAIL  worker: {row.pk} is stopping" in probed.getvalue()
        assert worker.wait(timeout=30) == 0, log_of(worker)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        worker.log_path.unlink(missing_ok=True)
    assert Workflow.objects.get(pk=run.pk).status == WorkflowStatus.COMPLETED


def log_of(worker: WorkerProcess) -> str:
    return f"the worker's log:\n{worker.log_path.read_text(errors='replace')}"
