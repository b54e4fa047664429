from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from orchestration import queue
from orchestration.models import Workflow, WorkflowStatus
from orchestration.worker import execute

ROOT = Path(__file__).resolve().parent.parent


def drain(max_runs: int = 100) -> list[str]:
    """Claim and run workflows in this thread (inside the test's transaction)
    until none is due, making retries due at once. Returns the outcomes."""
    outcomes = []
    for _ in range(max_runs):
        Workflow.objects.filter(status=WorkflowStatus.PENDING).update(run_after=None)
        runs = queue.claim("test-worker", None)
        if not runs:
            return outcomes
        outcomes.append(execute(runs[0]))
    raise AssertionError(f"still claiming after {max_runs} runs")


def worker_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONUNBUFFERED": "1"}
    env["DATABASE_NAME"] = connection.settings_dict["NAME"]
    env.update(extra)
    return env


def runworkers_command(*args: str) -> list[str]:
    return [sys.executable, str(ROOT / "manage.py"), "runworkers", *args]


def start_workers(*args: str, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen[str]:
    """A real ``runworkers`` process on the test database."""
    return subprocess.Popen(
        runworkers_command(*args),
        cwd=ROOT,
        env=env or worker_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def run_burst(*args: str, timeout: float = 120, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        runworkers_command("--burst", *args),
        cwd=ROOT,
        env=env or worker_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[str]]]:
    """Collects started worker processes and kills any still running at the end."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
