"""The chaos runs (see chaos_driver.py and failover_driver.py): SIGKILLed
workers and a PostgreSQL restart; a primary's failover to its replica."""

import subprocess
import sys

import pytest

from tests.support import ROOT


def run_driver(capsys, module: str, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", f"tests.acceptance.{module}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    with capsys.disabled():  # the counts belong in CI's log, pass or fail
        print("\n" + result.stdout)
    return result


@pytest.mark.chaos
def test_chaos__killed_workers_and_a_database_restart_lose_nothing_and_checkpoint_once(capsys):
    result = run_driver(capsys, "chaos_driver", "--workflows", "500", "--processes", "3")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "bodies run after their checkpoint             0" in result.stdout


@pytest.mark.chaos
def test_chaos__a_failover_to_a_synchronous_replica_loses_nothing_and_checkpoints_once(capsys):
    result = run_driver(capsys, "failover_driver", "--workflows", "300", "--processes", "3")
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "steps with more than one row                  0" in result.stdout
    assert "bodies run after their checkpoint             0" in result.stdout
