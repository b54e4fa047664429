"""A worker's log lines go through ``logging`` as it is: a hook on
``Logger.callHandlers`` (Sentry's logging integration) sees them, in the thread
that logged, and the project's console handler prints them."""

from __future__ import annotations

import pytest

from orchestration import start_workflow
from tests.support import run_burst, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def test_failed_run__its_error_line_passes_through_logger_call_handlers(tmp_path):
    run = start_workflow("permanent_failure")
    seen = tmp_path / "records"
    env = worker_env(DJANGO_SETTINGS_MODULE="tests.hooked_logging_settings", HOOKED_RECORDS=str(seen))
    result = run_burst("--concurrency", "2", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    errors = [line for line in seen.read_text().splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 1, seen.read_text()
    assert errors[0].startswith("ERROR orchestration.worker.execution ")
    assert f"workflow {run.pk} (permanent_failure) failed" in errors[0]
    assert "card declined" in errors[0]
    assert f"workflow {run.pk} (permanent_failure) failed" in result.stderr  # the console handler's line


def test_completed_run__its_info_line_is_handled_in_the_worker_thread_that_ran_it(tmp_path):
    run = start_workflow("echo", "hello")
    seen = tmp_path / "records"
    env = worker_env(DJANGO_SETTINGS_MODULE="tests.hooked_logging_settings", HOOKED_RECORDS=str(seen))
    result = run_burst("--concurrency", "1", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    completed = [line for line in seen.read_text().splitlines() if f"workflow {run.pk} (echo) completed" in line]
    assert len(completed) == 1, seen.read_text()
    assert completed[0].startswith("INFO orchestration.worker.execution orchestration-worker-1: ")
