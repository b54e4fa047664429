"""The chaos run (see chaos_driver.py): SIGKILLed workers and a PostgreSQL restart."""

import subprocess
import sys

import pytest

from tests.support import ROOT


@pytest.mark.chaos
def test_chaos__killed_workers_and_a_database_restart_lose_nothing_and_checkpoint_once(capsys):
    result = subprocess.run(
        [sys.executable, "-m", "tests.acceptance.chaos_driver", "--workflows", "500", "--processes", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    with capsys.disabled():  # the counts belong in CI's log, pass or fail
        print("\n" + result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "bodies run after their checkpoint             0" in result.stdout
